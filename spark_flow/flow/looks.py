"""Looking at every queue of a home (the controller's observations, the operator's view): the
looks that wait on storage or on the engine run :data:`READS_AT_ONCE` at a time, the others one
after another on the caller's thread.

A later look at a local queue read with deltalake with no new commit is a few file stats (its
handle is open, and :meth:`~spark_flow.store.lake.LakeTable.refresh` asks only whether a next
commit is there), so threads would only take turns holding the interpreter: 10,000 such looks
took 2.6 s in 8 threads and 0.8 s on one. A queue with a new commit reads it (deltalake's catch-up
and commit infos, which wait in Rust): that look goes with the waiting ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from spark_flow.flow.queue import open_queue
from spark_flow.rules.names import is_path
from spark_flow.store.handles import is_open
from spark_flow.store.io import uses_engine

T = TypeVar("T")

#: Looks that wait run this many at once (deltalake and py4j release the interpreter while they
#: wait): 16 read a home of 1,000 local queues opened for the first time in two thirds of 8's time.
READS_AT_ONCE = 16


def waits(path: str, storage_options: Mapping[str, str]) -> bool:
    """Whether a look at the queue at ``path`` waits on storage or on the engine: a queue on
    object storage, by catalog name or read through the engine, a queue's first look (which
    opens it: reads its log), and a look at a queue with a commit its handle has not read."""
    return ("://" in path or not is_path(path) or uses_engine(path, storage_options)
            or not is_open("queue", path, storage_options) or open_queue(path, storage_options).has_news())


def look_at_each(queues: Mapping[str, str], storage_options: Mapping[str, str],
                 look: Callable[[str, str], T]) -> dict[str, T]:
    """``look(name, path)`` of each queue (name -> path), by name in ``queues``' order: those
    that wait (:func:`waits`) :data:`READS_AT_ONCE` at a time, meanwhile the others on this
    thread."""
    waiting = [name for name, path in queues.items() if waits(path, storage_options)]
    at_once = set(waiting)
    with ThreadPoolExecutor(READS_AT_ONCE) as pool:
        waited = pool.map(lambda name: look(name, queues[name]), waiting)
        looked = {name: look(name, path) for name, path in queues.items() if name not in at_once}
        looked.update(zip(waiting, waited, strict=True))
    return {name: looked[name] for name in queues}
