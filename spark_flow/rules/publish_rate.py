"""A producer's publish rate: how long its next write waits so that it stays under its quota in
messages and bytes per second (Pulsar's publish rate, ``msgPublishRate`` / ``bytePublishRate``;
Kafka's producer quotas), instead of being stopped.

The limiter keeps one number, the time from which the quota is free again (the theoretical
arrival time of the generic cell rate algorithm): a write of ``n`` messages and ``b`` bytes costs
``max(n / msgPublishRate, b / bytePublishRate)`` seconds of quota, may start once the writes before
it are paid for, and its own cost is paid by the write after it (in this batch or the next). An
idle producer builds up no credit. The sink cuts a batch into writes of at most one second of
quota (:meth:`PublishRateLimiter.window`), the same cut as its capacity window, so the rate holds
within a batch too, and a producer never writes more than one second of quota ahead of its rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

#: Longest sleep between two looks at whether the query was stopped.
_LOOK = 0.1


class PublishRateLimiter:
    """The publish rate of one producer into one queue.

    Parameters
    ----------
    msg_rate : int
        Messages per second; 0 = no limit.
    byte_rate : int
        Bytes per second; 0 = no limit.
    """

    def __init__(self, msg_rate: int = 0, byte_rate: int = 0) -> None:
        self.msg_rate = msg_rate
        self.byte_rate = byte_rate
        self._free_at = -math.inf  # time.monotonic() from which the next write is within the quota

    @property
    def limited(self) -> bool:
        return bool(self.msg_rate or self.byte_rate)

    def window(self, count: int, size: int) -> float:
        """The most messages one write may take: one second of quota, in messages at the mean
        size of ``count`` messages of ``size`` bytes (at least one); infinite without a quota."""
        limits = [self.msg_rate] if self.msg_rate else []
        if self.byte_rate and size:
            limits.append(self.byte_rate * count // size)
        return max(1, min(limits)) if limits else math.inf

    def cost(self, count: int, size: int) -> float:
        """Seconds of quota a write of ``count`` messages of ``size`` bytes takes."""
        return max(count / self.msg_rate if self.msg_rate else 0.0, size / self.byte_rate if self.byte_rate else 0.0)

    def acquire(self, count: int, size: int, is_active: Callable[[], bool] = lambda: True) -> tuple[float, bool]:
        """Wait until a write of ``count`` messages of ``size`` bytes may start, and charge it.

        Returns the seconds waited, and whether the write may go: False when ``is_active()``
        turned False during the wait (the query is being stopped); the write is then not charged.
        """
        if not self.limited:
            return 0.0, True
        started = now = time.monotonic()
        while (left := self._free_at - now) > 0:
            if not is_active():
                return now - started, False
            time.sleep(min(left, _LOOK))
            now = time.monotonic()
        self._free_at = max(now, self._free_at) + self.cost(count, size)
        return now - started, True
