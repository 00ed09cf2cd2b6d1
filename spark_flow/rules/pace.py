"""Pacing (the queue setting ``pacing``): a queue's producers admitted at the rate its
subscriptions drain it, so the pipeline flows without the brokers' sawtooth.

On/off flow control lets a producer write until the depth passes the stop threshold, then holds
it until the depth falls under the resume threshold: the queue swings between the two, and a
consumer that drains it below resume waits idle for the producer's next batch. A paced queue
keeps the hold at stop (the hard bound, unchanged) and, below it, admits writes at the drain
rate plus the gap between the depth and the middle of the band closed over :data:`HORIZON`
seconds: the depth settles at the target, where the consumer always finds its next batch, and
the rate follows a consumer that speeds up, slows down or stops (the drain is measured over the
last :data:`WINDOW` seconds, a fall of it over the last :data:`RECENT`). Several producers of
one queue share the rate by their ``pacingWeight`` (1 each unless set, so equally): each writes
its weight's part of the rate, against the weights of the producers that wrote in the window or
are still paying for their last write at their share, itself included (a commit names its
producer and weight): a light producer of a slow queue waits longer than the window between its
writes, and is still one of the queue's producers meanwhile.

Each process measures the drain from its own looks at the queue (the messages that arrived
between two looks, less what the depth grew: :mod:`spark_flow.flow.drain`), so pacing needs no
process beyond the producers, and a producer admits its writes as the generic cell rate
algorithm does: a write may start once the one before it is paid for at the rate now in force.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spark_flow.rules.flow_state import Thresholds
from spark_flow.rules.settings import QueueSettings

#: Seconds over which the drain rate is measured.
WINDOW = 10.0
#: Seconds over which a fall of the drain rate is seen.
RECENT = 2.0
#: Seconds over which the gap between the depth and the target is closed.
HORIZON = 5.0
#: The most seconds a producer's last write keeps it among a queue's producers after the window
#: (its write is paid for so slowly, or the drain has stopped).
PAYING_AT_MOST = 6 * WINDOW


def target(thresholds: Thresholds) -> float:
    """The depth a paced queue steers to: the middle of its count band."""
    return (thresholds.stop_count + thresholds.resume_count) / 2


def chunk(thresholds: Thresholds) -> int:
    """The most messages the paced writes due at one moment take together: half the band (at
    least one), so they land under the stop (a gate divides it by the producers sharing the pace)."""
    return max(1, (thresholds.stop_count - thresholds.resume_count) // 2)


@dataclass(frozen=True)
class Pace:
    """The pace in force for one producer: the measured drain rate (None until the window holds
    two looks a second apart), the rate the queue's producers are admitted at, how many
    producers share it, this producer's weight and the weights of all of them together."""

    drain: float | None
    rate: float
    producers: int
    weight: int = 1
    weights: int = 1

    @property
    def part(self) -> float:
        """This producer's part of the rate: its weight against all the sharing producers'."""
        return self.weight / self.weights

    @property
    def share(self) -> float:
        """This producer's rate: messages per second."""
        return self.rate * self.part


@dataclass(frozen=True)
class Drained:
    """A subscription's drain as measured: messages a second (None until the window holds two
    looks a second apart), and the producers that wrote to the queue in the window or are still
    paying for their last write, with their weights."""

    rate: float | None = None
    writers: Mapping[str, int] = field(default_factory=dict)

    def pace(self, thresholds: Thresholds, depth: int, producer: str | None, weight: int = 1) -> Pace:
        """The pace in force for ``producer`` of ``weight`` at the subscription's ``depth``."""
        rate = max(0.0, (self.rate or 0.0) + (target(thresholds) - depth) / HORIZON)
        writers = {**self.writers, **({producer: weight} if producer else {})}
        return Pace(self.rate, rate, max(1, len(writers)), weight, max(weight, sum(writers.values())))


def _paying(count: int, part: float, rate: float | None) -> float:
    """Seconds a write of ``count`` messages takes to be paid for at a producer's ``part`` of the
    drain ``rate`` (an upper bound: the pace adds the depth's gap to the target to the drain);
    :data:`PAYING_AT_MOST` while nothing drains."""
    return count / (rate * part) if rate else PAYING_AT_MOST


def paced(settings: QueueSettings, depth: int, drained: Drained, producer: str | None = None,
          weight: int = 1) -> Pace | None:
    """The pace in force at a subscription's ``depth`` for ``producer`` of ``weight`` (None:
    any), None if the queue is not paced."""
    return drained.pace(settings.thresholds, depth, producer, weight) if settings.pacing else None


class DrainMeter:
    """A subscription's drain rate, from one process's looks over the last :data:`WINDOW` seconds."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._looks: deque[tuple[float, int, int]] = deque()  # (time.monotonic(), arrived so far, depth)
        self._arrived = 0
        self._writers: dict[str, tuple[float, int, int]] = {}  # producer: (when its last commit was seen, weight, messages)

    def look(self, now: float, depth: int, arrived: int, writers: Iterable[tuple[str, int, int]]) -> None:
        """Record a look: the depth now, and the messages that arrived since the last look and
        the producers that wrote them, each commit's with its weight and messages."""
        self._arrived += arrived
        self._looks.append((now, self._arrived, depth))
        while len(self._looks) > 2 and now - self._looks[1][0] >= self.window:
            self._looks.popleft()
        self._writers.update((writer, (now, weight, count)) for writer, weight, count in writers)
        for writer in [w for w, (seen, _, _) in self._writers.items() if now - seen > self.window + PAYING_AT_MOST]:
            del self._writers[writer]

    def measured(self) -> Drained:
        """The drain as measured now: over the window, or over the last :data:`RECENT` seconds if
        fewer (a consumer that slows down or stops is followed at once, one that speeds up as
        the window shows it)."""
        if not self._looks:
            return Drained()
        now = self._looks[-1][0]
        recent = next((look for look in reversed(self._looks) if now - look[0] >= RECENT), None)
        rates = [rate for first in (self._looks[0], recent) if (rate := self._since(first)) is not None]
        rate = min(rates, default=None)
        weights = sum(weight for _, weight, _ in self._writers.values())
        return Drained(rate, {writer: weight for writer, (seen, weight, count) in self._writers.items()
                              if now - seen <= self.window + _paying(count, weight / weights, rate)})

    def _since(self, first: tuple[float, int, int] | None) -> float | None:
        """The drain between ``first`` and the last look; None over less than a second."""
        (now, arrived_now, depth_now) = self._looks[-1]
        if first is None or now - first[0] < 1.0:
            return None
        began, arrived_then, depth_then = first
        return max(0.0, ((arrived_now - arrived_then) - (depth_now - depth_then)) / (now - began))
