"""Every flow-control decision about writing to one queue, used by the sink and the gated source.

A gate looks at a queue's depth per subscription, steps the flow state machine of each
subscription with flow control, and records transitions (compare and set, so two gates seeing
the same crossing count it once). A queue is stopped while any of its subscriptions is. The
decision needs no history beyond the recorded state, so a gate turns ON the moment it sees
``depth > stop``, whoever else is looking. It judges with the queue's recorded settings, the
same for every process; a producer's own settings say how it waits. A queue declared in a home
with home-wide limits (:mod:`spark_flow.flow.homeflow`) is stopped too while its home is, if its
producers are flow-controlled at all (policy ``flow``, ``producerFlowControl``).

The sink asks the gate, in order: whether a batch is refused before anything is written
(:meth:`Gate.refuse`: ``ring-strict``, ``onFull`` reject), how many messages it may write now
(:meth:`Gate.admit`: the capacity window, Qpid's, within one second of the producer's publish
rate and this producer's part of half a paced queue's band), when each write may start
(:meth:`Gate.throttle`: the publish rate, Pulsar's, and a paced queue's pace,
:mod:`spark_flow.rules.pace`), to make
room in a ring (:meth:`Gate.make_room`), and whether the batch may complete
(:meth:`Gate.complete`: ``onFull`` hold).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spark_flow.exceptions import HoldInterruptedError, QueueFullError, QueueFullTimeoutError
from spark_flow.flow.drain import measured_backlog
from spark_flow.flow.expiry import expire
from spark_flow.flow.homeflow import HomeStatus, open_home
from spark_flow.flow.queue import Queue
from spark_flow.flow.ring import discard_oldest
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState, Thresholds, producers_held
from spark_flow.rules.pace import Pace, chunk, paced
from spark_flow.rules.publish_rate import PublishRateLimiter
from spark_flow.rules.settings import ProducerSettings, QueueSettings

log = logging.getLogger("spark_flow.flow.gate")

_FIRST_POLL = 0.05


@dataclass(frozen=True)
class GateStatus:
    """What a gate saw: the queue's settings, depth and flow state per subscription, its
    home's (None: the queue has no home, or its producers are not flow-controlled) and, for a
    paced queue, the pace in force for this producer."""

    queue: str
    settings: QueueSettings
    depths: Mapping[str, Depth]
    states: Mapping[str, FlowState] = field(default_factory=dict)
    home: HomeStatus | None = None
    pace: Pace | None = None

    @property
    def held(self) -> bool:
        """Whether producers must wait: any subscription is flow-stopped, an operator stopped
        the queue's producers, or the queue's home is flow-stopped."""
        return producers_held(flow_stopped=(s.flow_stopped for s in self.states.values()),
                              producers_stopped=self.settings.producers_stopped, home_stopped=self.home_stopped)

    @property
    def home_stopped(self) -> bool:
        """Whether the home's limits hold the queue's producers."""
        return self.home is not None and self.home.flow_stopped

    @property
    def depth(self) -> Depth:
        """The queue's depth: per measure, its deepest subscription's (:meth:`Depth.deepest`)."""
        return Depth.deepest(self.depths.values())

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
        ``pollInterval``) and how fast it may write (``msgPublishRate``, ``bytePublishRate``).
    """

    def __init__(self, queue: Queue, producer: ProducerSettings | None = None) -> None:
        self.queue = queue
        self.producer = producer or ProducerSettings()
        self.home = open_home(queue.home, queue.storage_options) if queue.home else None
        self.publish_rate = PublishRateLimiter(self.producer.msg_publish_rate, self.producer.byte_publish_rate)
        self._paced: tuple[float, int] = (-math.inf, 0)  # when the last paced write started, its messages
        self._pacing_part = 1.0  # this producer's part of the pace at the last look

    def step(self, producer: str | None = None) -> GateStatus:
        """Look at the queue now: depth per subscription, state machine stepped and recorded;
        then at its home, if it has one and the queue's producers are flow-controlled; for a
        paced queue, the pace in force for ``producer`` (:mod:`spark_flow.flow.drain`)."""
        queue = self.queue
        queue.refresh()
        settings = queue.settings()
        expire(queue, settings)  # an expired message holds nobody
        home = self.home.step() if self.home is not None and settings.flow_controlled else None
        while True:
            backlog, now = measured_backlog(queue), int(time.time() * 1000)
            states: dict[str, FlowState] = {}
            for sub, depth, _ in backlog:
                row = queue.recorder.step(sub, settings.thresholds, depth, now)
                if row is None:
                    break  # another process recorded a transition first: look again
                states[sub.name] = row.flow_state
            else:
                break
        # the slowest subscription's pace: every subscription gets its next batch, none piles up
        weight = self.producer.pacing_weight
        pace = min((p for _, depth, drained in backlog if (p := paced(settings, depth.count, drained, producer, weight))),
                   key=lambda p: p.rate, default=None)
        self._pacing_part = pace.part if pace is not None else 1.0
        return GateStatus(queue.name, settings, {sub.name: depth for sub, depth, _ in backlog}, states, home, pace)

    def refuse(self, batch: Depth, is_active: Callable[[], bool]) -> float:
        """Before a batch's first write: raise if this queue refuses it, so a refused batch is in
        none of its queues. A ``ring-strict`` queue refuses a batch larger than its max; a
        stopped queue refuses a producer with ``onFull`` reject (at once) or reject-after
        (after ``rejectTimeout``). Returns the seconds held. A ``hold`` producer into any other
        queue is never refused, so nothing is looked at."""
        settings = self.queue.settings()
        if settings.policy != "ring-strict" and self.producer.on_full == "hold":
            return 0.0
        status = self.step()
        if status.settings.policy == "ring-strict":
            _refuse_over_max(status, batch)
        if status.held and self.producer.on_full != "hold":
            return self.admit(batch, is_active, started=False)[0]
        return 0.0

    def admit(self, batch: Depth, is_active: Callable[[], bool], *, started: bool) -> tuple[float, float]:
        """How many more of ``batch``'s messages this producer may write in one go, once it may
        write any.

        A ``hold`` producer writes the first part of a fresh batch at once: its capacity window
        (Qpid's), the messages in flight when the queue turned ON; so it needs no look at the
        queue's depth (the look after the write, :meth:`complete`, is the batch's one look).
        Anything after it (the next chunk, the rest of a replayed batch: ``started``), any part
        for a ``reject`` producer, and anything while an operator stopped the producers waits
        until the queue is not stopped. Returns the seconds held and the window: ``capacity``
        messages, or all of them when no limit applies to the producers; at most one second of
        the producer's publish rate at the batch's mean message size. Raises
        :class:`HoldInterruptedError` when the query is stopped while held, or before a write
        after the batch's first (Spark's stop interrupts the batch's jobs, but a JVM call that
        swallows the interruption lets the batch go on, chunk after chunk).
        """
        if started and not is_active():
            raise HoldInterruptedError(f"query stopped in mid-batch into queue {self.queue.name!r}; the rest of the "
                                       "batch is enqueued when the query restarts")
        settings, held = self.queue.settings(), 0.0
        if started or self.producer.on_full != "hold" or settings.producers_stopped:
            status = self.step()
            if status.held:
                status, held = self.wait(status, is_active)
                if status.held:
                    raise HoldInterruptedError(f"query stopped while held by queue {status.queue!r} in mid-batch; "
                                               "the rest of the batch is enqueued when the query restarts")
            settings = status.settings
        window = self.producer.capacity if self._limited(settings) else math.inf
        if settings.pacing:  # the producers' writes due at one moment land under the stop together
            window = min(window, max(1, int(chunk(settings.thresholds) * self._pacing_part)))
        return held, min(window, self.publish_rate.window(batch.count, batch.size))

    def throttle(self, write: Depth, is_active: Callable[[], bool], producer: str | None = None) -> float:
        """Wait until the producer's publish rate lets it start a write of ``write``'s messages
        and bytes (the writes before it paid for), and then, into a paced queue, its pace
        (:meth:`pace`). Returns the seconds throttled. Raises :class:`HoldInterruptedError`
        when the query is stopped while throttled."""
        throttled, go = self.publish_rate.acquire(write.count, write.size, is_active)
        if go and self.queue.settings().pacing:
            paced, go = self.pace(write.count, is_active, producer)
            throttled += paced
        if not go:
            raise HoldInterruptedError(f"query stopped while throttled by its publish rate or pace into queue "
                                       f"{self.queue.name!r}; the rest of the batch is enqueued when the query "
                                       "restarts")
        return throttled

    def pace(self, count: int, is_active: Callable[[], bool], producer: str | None = None) -> tuple[float, bool]:
        """Wait until a write of ``count`` messages may start into a paced queue: once the write
        before it is paid for at ``producer``'s share of the pace now in force, looking at the
        queue again at least every ``pollInterval`` (a pace of 0, with the depth at its target
        and nothing drained, waits for the consumer). Returns the seconds waited, and False if
        ``is_active()`` turned False meanwhile."""
        started = time.monotonic()
        last_start, last_count = self._paced
        while True:
            status = self.step(producer)
            if status.pace is None:  # pacing was switched off meanwhile
                break
            share, now = status.pace.share, time.monotonic()
            due = last_start + last_count / share if share > 0 else math.inf
            if now >= due:
                break
            if not is_active():
                return now - started, False
            time.sleep(min(due - now, self.producer.poll_interval))
        self._paced = (time.monotonic(), count)
        return self._paced[0] - started, True

    def _limited(self, settings: QueueSettings) -> bool:
        """Whether any limit applies to the producers (so they write in capacity windows): the
        queue's thresholds, or its home's limits when its producers are flow-controlled."""
        return settings.thresholds.enabled or (self.home is not None and settings.flow_controlled
                                               and self.home.thresholds().enabled)

    def make_room(self) -> None:
        """After a write into a ring queue: move subscriptions past the oldest messages beyond
        the queue's max."""
        settings = self.queue.settings()
        if settings.policy.startswith("ring"):
            self.queue.refresh()
            discard_oldest(self.queue, settings)

    def complete(self, is_active: Callable[[], bool]) -> tuple[GateStatus, float]:
        """Whether a written batch may complete: a ``hold`` producer's batch completes only once
        the queue is not stopped (the hold that keeps its source from reading on). Returns the
        status and the seconds held; :meth:`holds` says whether the status still holds it."""
        status = self.step()
        if self.holds(status):
            return self.wait(status, is_active)
        return status, 0.0

    def holds(self, status: GateStatus) -> bool:
        """Whether ``status`` keeps this producer's written batch from completing."""
        return status.held and self.producer.on_full == "hold"

    def wait(self, status: GateStatus, is_active: Callable[[], bool] = lambda: True) -> tuple[GateStatus, float]:
        """Return once the queue is not flow-stopped, as the producer's ``onFull`` says, from
        ``status``: the caller's look that found it stopped (looking again first would lose a
        hold that ends in between, and report a stopped queue as never held).

        ``hold`` polls with a backoff up to ``pollInterval``; ``reject`` raises at once;
        ``reject-after`` raises after ``rejectTimeout``. Returns the last status and the
        seconds held. Returns early, still stopped, when ``is_active()`` turns False (the
        query is being stopped): the caller decides what that means for its batch.
        """
        producer = self.producer
        if not status.held:
            return status, 0.0
        if producer.on_full == "reject":
            raise QueueFullError(status.queue, *_limit(status), f"{_why(status)}, onFull reject")
        started = time.monotonic()
        depth, thresholds = _limit(status)
        log.info("holding producer of queue %r (%s): depth %d messages / %d bytes, thresholds %s",
                 status.queue, _why(status), depth.count, depth.size, thresholds)
        delay = min(_FIRST_POLL, producer.poll_interval)
        while status.held and is_active():
            held = time.monotonic() - started
            if producer.on_full == "reject-after" and held >= producer.reject_timeout:
                raise QueueFullTimeoutError(status.queue, *_limit(status),
                                            f"{_why(status)}, held {held:.1f}s, rejectTimeout {producer.reject_timeout:g}s")
            time.sleep(delay)
            delay = min(delay * 2, producer.poll_interval)
            status = self.step()
        held = time.monotonic() - started
        if not status.held:
            log.info("resuming producer of queue %r after %.1fs: depth %d messages / %d bytes",
                     status.queue, held, status.depth.count, status.depth.size)
        return status, held


def _holding_home(status: GateStatus) -> HomeStatus | None:
    """The home, when it alone holds the queue's producers (no subscription is flow-stopped)."""
    if status.home is None or not status.home_stopped or any(s.flow_stopped for s in status.states.values()):
        return None
    return status.home


def _why(status: GateStatus) -> str:
    if status.settings.producers_stopped:
        return "producers stopped by an operator"
    home = _holding_home(status)
    return f"home {home.home} flow-stopped by its home-wide limits" if home is not None else "flow-stopped"


def _limit(status: GateStatus) -> tuple[Depth, Thresholds]:
    """The depth and thresholds that hold a producer: the queue's, or its home's when only the
    home is stopped."""
    home = _holding_home(status)
    return (home.depth, home.thresholds) if home is not None else (status.depth, status.thresholds)


def _refuse_over_max(status: GateStatus, batch: Depth) -> None:
    """ring-strict: a batch that alone exceeds the queue's max is refused before it is written."""
    settings = status.settings
    if (settings.max_count and batch.count > settings.max_count) or (settings.max_size and batch.size > settings.max_size):
        limit = Thresholds(settings.max_count, settings.max_count, settings.max_size, settings.max_size)
        raise QueueFullError(status.queue, batch, limit, f"ring-strict queue cannot take a batch of {batch.count} "
                                                         f"messages / {batch.size} bytes above its max")

