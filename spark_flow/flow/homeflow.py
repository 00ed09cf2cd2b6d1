"""Home-wide limits: flow control over the total depth of every queue of a home, as ActiveMQ's
``systemUsage`` limits a whole broker beside each destination's own limit.

A home's limits (``homeStopCount``, ``homeResumeCount``, ``homeStopSize``, ``homeResumeSize``)
are recorded with the home (``<home>/_spark_flow/settings``), so every process judges it with
the same values: a process's Spark conf supplies a limit nobody recorded, an operator's
``set-home`` replaces it. The home's depth is the sum over its registered queues of each
queue's depth (per measure, its deepest subscription's). Its flow state is stepped by the same
machine as a queue's and recorded the same way: a compare-and-set on a one-row flow table and a
transitions history, so a transition is counted once however many gates and controllers see it.

A home without limits costs a gate one look at its settings table (a version check): its
queues are not read, its state is not touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_flow.exceptions import QueueNotFoundError, SubscriptionNotFoundError
from spark_flow.flow.queue import open_queue
from spark_flow.flow.recorder import FlowRecorder
from spark_flow.records.home import Registry, control_path
from spark_flow.records.runtime_settings import RuntimeSettings
from spark_flow.records.subscriptions import FlowRowTable
from spark_flow.records.transitions import TransitionTable
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState, Thresholds
from spark_flow.rules.names import normalize_path
from spark_flow.rules.settings import home_thresholds
from spark_flow.store.handles import shared

log = logging.getLogger("spark_flow.records.home")

#: How the home shows where a queue would (status, history, plot): every queue, as the CLI's
#: target for all queues, and the name of its one flow state's row.
HOME_QUEUE = ">"
HOME_ROW = "home"


def home_depth(queues: Iterable[Iterable[Depth]]) -> Depth:
    """A home's depth: the sum over its queues of each one's depth (its subscriptions' depths,
    per measure the deepest's: what holds its producers)."""
    return sum((Depth.deepest(depths) for depths in queues), Depth())


@dataclass(frozen=True)
class HomeStatus:
    """What a look at a home saw: its limits, depth and flow state."""

    home: str
    thresholds: Thresholds
    depth: Depth = field(default_factory=Depth)
    state: FlowState = field(default_factory=FlowState)
    last_transition: Any = None

    @property
    def flow_stopped(self) -> bool:
        return self.state.flow_stopped

    @property
    def limited(self) -> bool:
        """Whether the home has a limit at all."""
        return self.thresholds.enabled


class HomeFlow:
    """The home-wide limits of the home at ``home``: its settings, depth and flow state.

    Parameters
    ----------
    home : str
        The control plane's location (``spark.flow.home``).
    storage_options : mapping, optional
        deltalake storage options (object store credentials).
    """

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.home = normalize_path(home)
        self.storage_options = dict(storage_options or {})
        self.registry = Registry(self.home, self.storage_options)
        self.settings_table = RuntimeSettings(control_path(self.home, "settings"), self.storage_options)
        self.flow = FlowRowTable(control_path(self.home, "flow"), HOME_QUEUE, self.storage_options)
        self.history = TransitionTable(control_path(self.home, "transitions"), HOME_QUEUE, self.storage_options)
        self.recorder = FlowRecorder(self.flow, self.history, lambda _row: f"home {self.home}")
        self._thresholds: tuple[dict[str, str], Thresholds] | None = None
        self._state_ready = False

    def thresholds(self) -> Thresholds:
        """The home's limits as recorded; parsed again only when they changed."""
        recorded = self.settings_table.current()
        if self._thresholds is None or self._thresholds[0] != recorded:
            self._thresholds = (recorded, home_thresholds(recorded))
        return self._thresholds[1]

    def depth(self) -> Depth:
        """The home's depth (:func:`home_depth`), read from its queues. Each queue's ledger reads
        only the commits since its last look; a queue that cannot be read holds nothing."""
        queues = []
        for name, path in self.registry.queues().items():
            try:
                queues.append(open_queue(path, self.storage_options).depths().values())
            except QueueNotFoundError as error:  # dropped: it holds nothing
                log.warning("home %s: cannot read queue %r at %s: %s", self.home, name, path, error)
        return home_depth(queues)

    def step(self, depth: Depth | None = None) -> HomeStatus:
        """Look at the home now: step its flow state with its depth (``depth`` as given, else
        read from its queues) and record a transition, compare and set. A home without limits
        is not read further, unless ``depth`` is given (the controller), which also records the
        resume of a home whose limits were removed while it was stopped."""
        thresholds = self.thresholds()
        if not thresholds.enabled and (depth is None or not self.recorded_stopped()):
            return HomeStatus(self.home, thresholds)
        self._ensure_state()
        while True:
            seen = self.depth() if depth is None else depth
            row = self.recorder.step(self.flow.get(HOME_ROW), thresholds, seen, int(time.time() * 1000))
            if row is not None:  # else another process recorded a transition first: look again
                return HomeStatus(self.home, thresholds, seen, row.flow_state, row.last_transition)

    def recorded_stopped(self) -> bool:
        """Whether the home's recorded flow state is stopped, without a look at its depth."""
        try:
            return self.flow.get(HOME_ROW).flow_stopped
        except (QueueNotFoundError, SubscriptionNotFoundError):  # never limited: no state recorded
            return False

    def _ensure_state(self) -> None:
        """The one-row flow table, made by the first process that needs it."""
        if not self._state_ready:
            self.flow.create_table()
            self.flow.create(HOME_ROW, -1)
            self._state_ready = True


def open_home(home: str, storage_options: Mapping[str, str] | None = None) -> HomeFlow:
    """A :class:`HomeFlow` for ``home``, shared within the process so its reads stay cached."""
    return shared("home", home, storage_options, HomeFlow)
