"""How fast each subscription drains its queue, as this process's looks at the queue see it.

Every look at a queue (a producer's gate, the controller's, ``spark-flow serve``'s) reads the
commits that arrived since the process's last look and each subscription's depth; a
:class:`~spark_flow.rules.pace.DrainMeter` per subscription turns the two into a drain rate. A
paced queue's gate admits its producer by it, and the controller and ``serve`` report it. The
meters live as long as the process: a process's first two looks start them.
"""

from __future__ import annotations

import threading
import time

from spark_flow.flow.queue import Queue
from spark_flow.records.subscriptions import Subscription
from spark_flow.rules.depth import Depth
from spark_flow.rules.pace import Drained, DrainMeter

_lock = threading.Lock()
_seen: dict[str, int] = {}  # each queue's latest version at the process's last look (by path)
_meters: dict[tuple[str, str], DrainMeter] = {}  # by queue path and subscription


def measured_backlog(queue: Queue) -> list[tuple[Subscription, Depth, Drained]]:
    """:meth:`Queue.backlog` up to the version last read, each subscription with its drain as
    its meter measures it, this look recorded in it. The arrivals are read before the backlog
    lets the ledger forget what every subscription acknowledged: they cost no read of their own."""
    latest = queue.version()
    with _lock:
        seen = _seen.get(queue.path)
        _seen[queue.path] = latest if seen is None else max(seen, latest)
    arrived = queue.ledger.commits(seen, latest) if seen is not None and seen < latest else []
    backlog = queue.backlog(refresh=False)
    count, now = sum(c.count for c in arrived), time.monotonic()
    writers = [(c.producer, c.weight, c.count) for c in arrived if c.producer]
    measured = []
    with _lock:
        for sub, depth in backlog:
            meter = _meters.setdefault((queue.path, sub.name), DrainMeter())
            meter.look(now, depth.count, count, writers)
            measured.append((sub, depth, meter.measured()))
    return measured
