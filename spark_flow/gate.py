"""The one hold / reject decision, used by the sink and by the gated source.

A gate looks at a queue's depth per subscription, steps the flow state machine of each
subscription with flow control, and records transitions in the subscriptions table (compare and
set, so two gates seeing the same crossing count it once). A queue is stopped while any of its
subscriptions is. The decision needs no history beyond the recorded state, so a gate turns ON
the moment it sees ``depth > stop``, whoever else is looking. It judges with the queue's
recorded settings, the same for every process (a producer's own settings only say how it waits).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from spark_flow.config import ProducerSettings, QueueSettings
from spark_flow.exceptions import QueueFullError, QueueFullTimeoutError
from spark_flow.ledger import Depth
from spark_flow.queue import Queue
from spark_flow.state import FlowState, Thresholds

log = logging.getLogger("spark_flow.gate")

_FIRST_POLL = 0.05


@dataclass(frozen=True)
class GateStatus:
    """What a gate saw: the queue's settings, depth and flow state per subscription."""

    queue: str
    settings: QueueSettings
    depths: Mapping[str, Depth]
    states: Mapping[str, FlowState] = field(default_factory=dict)

    @property
    def stopped(self) -> bool:
        """Whether producers must wait: any subscription is flow-stopped, or an operator
        stopped the queue's producers."""
        return self.settings.producers_stopped or any(s.flow_stopped for s in self.states.values())

    @property
    def depth(self) -> Depth:
        """The deepest subscription's depth (the one that stops producers first)."""
        return max(self.depths.values(), key=lambda d: (d.count, d.size), default=Depth())

    @property
    def thresholds(self) -> Thresholds:
        return self.settings.thresholds

    @property
    def flow_stopped_count(self) -> int:
        return max((s.flow_stopped_count for s in self.states.values()), default=0)


class Gate:
    """Flow control of one queue as one producer (or gated source) sees it.

    Parameters
    ----------
    queue : Queue
    producer : ProducerSettings, optional
        How this producer waits while the queue is stopped (``onFull``, ``rejectTimeout``,
        ``pollInterval``).
    """

    def __init__(self, queue: Queue, producer: ProducerSettings | None = None) -> None:
        self.queue = queue
        self.producer = producer or ProducerSettings()

    def observe(self) -> GateStatus:
        """Look at the queue now: depth per subscription, state machine stepped and recorded."""
        queue = self.queue
        latest = queue.refresh()
        settings = queue.settings()
        while True:
            subs = queue.subscriptions.list()
            depths = {s.name: queue.ledger.depth(s.position, latest) for s in subs}
            states, raced = {}, False
            for sub in subs:
                queue.history.ensure(sub, depths[sub.name], settings.thresholds)
                before = FlowState(sub.flow_stopped, sub.flow_stopped_count)
                after = before.observe(settings.thresholds, depths[sub.name].count, depths[sub.name].size)
                if after != before:
                    if not queue.subscriptions.transition(sub, after.flow_stopped, after.flow_stopped_count):
                        raced = True
                        break
                    _log_transition(queue.name, sub.name, after, depths[sub.name], settings.thresholds)
                    queue.history.record(replace(sub, flow_stopped=after.flow_stopped,
                                                 flow_stopped_count=after.flow_stopped_count),
                                         depths[sub.name], settings.thresholds)
                states[sub.name] = after
            if not raced:
                if subs:
                    queue.ledger.forget(min(s.position for s in subs))
                return GateStatus(queue.name, settings, depths, states)

    def wait(self, is_active: Callable[[], bool] = lambda: True) -> tuple[GateStatus, float]:
        """Return once the queue is not flow-stopped, as the producer's ``onFull`` says.

        ``hold`` polls with a backoff up to ``pollInterval``; ``reject`` raises at once;
        ``reject-after`` raises after ``rejectTimeout``. Returns the last status and the
        seconds held. Returns early, still stopped, when ``is_active()`` turns False (the
        query is being stopped): the caller decides what that means for its batch.
        """
        producer = self.producer
        status = self.observe()
        if not status.stopped:
            return status, 0.0
        if producer.on_full == "reject":
            raise QueueFullError(status.queue, status.depth, status.thresholds, f"{_why(status)}, onFull reject")
        started = time.monotonic()
        log.info("holding producer of queue %r (%s): depth %d messages / %d bytes, thresholds %s",
                 status.queue, _why(status), status.depth.count, status.depth.size, status.thresholds)
        delay = min(_FIRST_POLL, producer.poll_interval)
        while status.stopped and is_active():
            held = time.monotonic() - started
            if producer.on_full == "reject-after" and held >= producer.reject_timeout:
                raise QueueFullTimeoutError(status.queue, status.depth, status.thresholds,
                                            f"{_why(status)}, held {held:.1f}s, rejectTimeout {producer.reject_timeout:g}s")
            time.sleep(delay)
            delay = min(delay * 2, producer.poll_interval)
            status = self.observe()
        held = time.monotonic() - started
        if not status.stopped:
            log.info("resuming producer of queue %r after %.1fs: depth %d messages / %d bytes",
                     status.queue, held, status.depth.count, status.depth.size)
        return status, held


def _why(status: GateStatus) -> str:
    return "producers stopped by an operator" if status.settings.producers_stopped else "flow-stopped"


def _log_transition(queue: str, subscription: str, state: FlowState, depth: Depth, thresholds: Thresholds) -> None:
    log.info("queue %r subscription %r flow %s (flowStoppedCount %d): depth %d messages / %d bytes, %s",
             queue, subscription, "STOPPED" if state.flow_stopped else "RESUMED", state.flow_stopped_count,
             depth.count, depth.size, thresholds)

