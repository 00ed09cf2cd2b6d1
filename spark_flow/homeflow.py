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
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spark_flow.config import HOME_KEYS, conf_settings, home_thresholds
from spark_flow.exceptions import QueueNotFoundError, SubscriptionNotFoundError
from spark_flow.history import HistoryTable, transition_detail
from spark_flow.home import Registry, control_path
from spark_flow.ledger import Depth
from spark_flow.names import normalize_path
from spark_flow.overrides import OverrideTable
from spark_flow.queue import open_queue
from spark_flow.state import FlowState, Thresholds
from spark_flow.subscriptions import Subscription, SubscriptionTable

log = logging.getLogger("spark_flow.home")

#: How the home shows where a queue would (status, history, plot): every queue, as the CLI's
#: target for all queues, and its one flow state.
HOME_QUEUE = ">"
HOME_STATE = "home"


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
        self.settings = OverrideTable(control_path(self.home, "settings"), self.storage_options)
        self.flow = SubscriptionTable(control_path(self.home, "flow"), HOME_QUEUE, self.storage_options)
        self.history = HistoryTable(control_path(self.home, "transitions"), HOME_QUEUE, self.storage_options)
        self._thresholds: tuple[dict[str, str], Thresholds] | None = None
        self._state_ready = False

    def thresholds(self) -> Thresholds:
        """The home's limits as recorded; parsed again only when they changed."""
        recorded = self.settings.settings()
        if self._thresholds is None or self._thresholds[0] != recorded:
            self._thresholds = (recorded, home_thresholds(recorded))
        return self._thresholds[1]

    def record_conf(self, conf: Mapping[str, Any]) -> Thresholds:
        """Record the home limits a process's Spark conf gives and the home has none recorded
        for; the whole is checked before anything is written. Returns the limits in force."""
        given = {name: raw for name, (_key, raw) in conf_settings("", conf, "home").items() if name in HOME_KEYS}
        if given:
            keys = {name: key for name, (key, _raw) in conf_settings("", conf, "home").items() if name in HOME_KEYS}
            recorded = self.settings.settings()
            missing = {name: raw for name, raw in given.items() if name not in recorded}
            home_thresholds(recorded, {keys[n]: raw for n, raw in missing.items()})  # raises naming the conf's keys
            if missing:
                self.settings.fill({name: str(raw) for name, raw in missing.items()})
        return self.thresholds()

    def depth(self) -> Depth:
        """The home's depth: the sum over its queues of each queue's depth, per measure its
        deepest subscription's. Each queue's ledger reads only the commits since its last look."""
        total = Depth()
        for name, path in self.registry.queues().items():
            try:
                depths = open_queue(path, self.storage_options).depths()
            except QueueNotFoundError as error:  # dropped: it holds nothing
                log.warning("home %s: cannot read queue %r at %s: %s", self.home, name, path, error)
                continue
            total += Depth(max((d.count for d in depths.values()), default=0),
                           max((d.size for d in depths.values()), default=0))
        return total

    def observe(self, depth: Depth | None = None) -> HomeStatus:
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
            row = self.flow.get(HOME_STATE)
            self.history.ensure(row, seen, thresholds)
            before = FlowState(row.flow_stopped, row.flow_stopped_count)
            after = before.observe(thresholds, seen.count, seen.size)
            if after == before:
                return HomeStatus(self.home, thresholds, seen, after, row.last_transition)
            if self._transition(row, after, seen, thresholds):
                return HomeStatus(self.home, thresholds, seen, after, self.flow.get(HOME_STATE).last_transition)

    def recorded_stopped(self) -> bool:
        """Whether the home's recorded flow state is stopped, without a look at its depth."""
        try:
            return self.flow.get(HOME_STATE).flow_stopped
        except (QueueNotFoundError, SubscriptionNotFoundError):  # never limited: no state recorded
            return False

    def _ensure_state(self) -> None:
        """The one-row flow table, made by the first process that needs it."""
        if not self._state_ready:
            self.flow.create_table()
            self.flow.create(HOME_STATE, -1)
            self._state_ready = True

    def _transition(self, row: Subscription, after: FlowState, depth: Depth, thresholds: Thresholds) -> bool:
        detail = transition_detail(depth, thresholds, datetime.now(UTC))
        made = self.flow.transition(row, after.flow_stopped, after.flow_stopped_count, detail)
        if made is None:
            return False  # another process recorded a transition first: look again
        log.info("home %s flow %s (flowStoppedCount %d): depth %d messages / %d bytes, %s", self.home,
                 "STOPPED" if after.flow_stopped else "RESUMED", after.flow_stopped_count, depth.count, depth.size,
                 thresholds)
        self.history.record(made)
        return True


_OPEN: dict[tuple[str, tuple[tuple[str, str], ...]], HomeFlow] = {}
_OPEN_LOCK = threading.Lock()


def open_home(home: str, storage_options: Mapping[str, str] | None = None) -> HomeFlow:
    """A :class:`HomeFlow` for ``home``, shared within the process so its reads stay cached."""
    key = (normalize_path(home), tuple(sorted((storage_options or {}).items())))
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = HomeFlow(key[0], storage_options)
        return _OPEN[key]
