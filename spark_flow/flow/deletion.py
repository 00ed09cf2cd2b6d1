"""Deleting a queue, as RabbitMQ's ``delete_queue``: its table, its state location (subscriptions,
transition history, run-time settings, hold times, writer claims) and its home registration.

RabbitMQ's guards come first, and a refused deletion removes nothing: ``if_empty`` refuses a
queue with messages a subscription has not acknowledged, ``if_unused`` one a live query reads (a
subscription's reader seen within ``readerTimeout`` and, on this host, with its process running).
The queue's Delta log goes first: from then on every process's next look at the queue raises
:class:`~spark_flow.exceptions.QueueNotFoundError` (:meth:`Queue.refresh
<spark_flow.flow.queue.Queue.refresh>`), and a write racing the deletion has its commit refused and
removes what it wrote (:class:`~spark_flow.store.tables.Owner`). Then the table's other files, the
state location, the registration and the queue's status rows.

Files are removed with pyarrow's file systems, and on HDFS with ``hdfs-native``'s client (no
JVM), reached with deltalake's storage options (:func:`~spark_flow.store.access.remove_location`):
no SparkSession. A queue declared by its catalog name (governed compute: a schema home, managed
tables) is dropped by the engine instead, the queue's table first, then its state tables
(``DROP TABLE``: the process needs a session, as everything by name does). A catalog table
declared by path is refused: only Spark can drop its catalog entry, and deleting the queue
afterwards removes its state and registration. A queue whose table is gone already (dropped,
its directory removed) is deleted the same way: what is left at its location, the state location
its home gave it (``<home>/<queue>``, ``<schema>.<queue>_*`` tables), the registration.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_flow.exceptions import QueueDeleteRefusedError, QueueNotFoundError
from spark_flow.flow.queue import CATALOG_TABLE, STATE_TABLES, SUBSCRIPTIONS, Queue
from spark_flow.records.home import CONTROL_DIR, Registry
from spark_flow.records.status import control_table
from spark_flow.records.subscriptions import READER_TIMEOUT, age, process_gone
from spark_flow.rules.names import home_member, is_path, state_member
from spark_flow.store.access import remove_location
from spark_flow.store.engine import engine_drop
from spark_flow.store.handles import forget
from spark_flow.store.table import is_table, sql_string

log = logging.getLogger("spark_flow.ops.admin")


@dataclass(frozen=True)
class DeletedQueue:
    """What a deletion removed: the queue's table location and its state location (None when
    its table was gone and no state of it was left)."""

    name: str
    path: str
    state_location: str | None


def delete_queue(home: str, name: str, storage_options: Mapping[str, str], *, if_empty: bool = False,
                 if_unused: bool = False) -> DeletedQueue:
    """Delete queue ``name`` of ``home`` (see the module's docstring).

    Raises
    ------
    QueueNotFoundError
        ``name`` is not registered (the message names the registered queues), or its location
        holds a Delta table that is not a queue.
    QueueDeleteRefusedError
        A guard refused, the queue is a catalog table, or its locations hold the home or another
        queue; nothing was removed.
    """
    registry = Registry(home, storage_options)
    queues = registry.queues()
    if name not in queues:
        raise QueueNotFoundError(name, f"not registered in {home}: allowed is one of "
                                       f"{', '.join(map(repr, queues)) or 'none (declare one)'}")
    path = queues[name]
    queue = _still_there(path, storage_options)
    if queue is not None:
        _guard(queue, if_empty=if_empty, if_unused=if_unused, by_name=not is_path(path))
        state: str | None = queue.state_location
    else:
        state = _state_left(home, name, storage_options)
    locations = [path, *([state] if state else [])]
    _refuse_shared(name, locations, home, [p for n, p in queues.items() if n != name])
    _remove(path, state, storage_options)
    registry.unregister(name)
    control_table(home, "status", storage_options).delete(f"queue = {sql_string(name)}")
    forget("queue", path)
    log.info("queue %r deleted: its table at %s, its state at %s, its registration in %s", name, path, state, home)
    return DeletedQueue(name, path, state)


def _still_there(path: str, storage_options: Mapping[str, str]) -> Queue | None:
    """The queue at ``path``, None if its table is gone; a Delta table there that is not a queue
    raises (it is not spark-flow's to delete)."""
    try:
        return Queue(path, storage_options)
    except QueueNotFoundError:
        if is_table(path, storage_options):
            raise
        return None


def _remove(path: str, state: str | None, storage_options: Mapping[str, str]) -> None:
    """Remove the queue's table, its log first (every process's next look fails from there),
    then its state: files at a path, tables by a catalog name."""
    if is_path(path):
        remove_location(posixpath.join(path, "_delta_log"), storage_options)
        remove_location(path, storage_options)
    else:
        engine_drop(path)
    if state is None:
        return
    if is_path(state):
        remove_location(state, storage_options)
        return
    for table in STATE_TABLES:
        engine_drop(state_member(state, table))


def _guard(queue: Queue, *, if_empty: bool, if_unused: bool, by_name: bool) -> None:
    """Refuse a catalog table declared by path (Spark drops it), and what RabbitMQ's guards refuse."""
    table = queue.properties().get(CATALOG_TABLE)
    if table and not by_name:
        raise QueueDeleteRefusedError(
            queue.name, f"it is the catalog table {table}, whose catalog entry only Spark can drop",
            f"a queue by path here; drop this one in Spark (DROP TABLE {table}: its producers and consumers "
            "fail at their next look), then delete it again to remove its state and registration")
    if if_empty:
        waiting = {sub.name: depth.count for sub, depth in queue.backlog() if depth.count}
        if waiting:
            counts = ", ".join(f"subscription {sub!r}: {count}" for sub, count in waiting.items())
            raise QueueDeleteRefusedError(queue.name, f"it has messages not acknowledged ({counts}) and if_empty "
                                                      "(--if-empty) is set",
                                          "with if_empty a queue whose every subscription has acknowledged every message")
    if if_unused:
        readers = [sub for sub in queue.subscriptions.list()
                   if sub.reader and not process_gone(sub.reader_process, sub.reader_seen, READER_TIMEOUT)]
        if readers:
            named = ", ".join(f"subscription {sub.name!r} by reader {sub.reader!r} (process {sub.reader_process}, "
                              f"seen {age(sub.reader_seen):.1f}s ago)" for sub in readers)
            raise QueueDeleteRefusedError(queue.name, f"it has consumers ({named}) and if_unused (--if-unused) is set",
                                          "with if_unused a queue no live query reads: stop its consumers first (a "
                                          f"reader not seen for {READER_TIMEOUT:g}s is taken to be gone)")


def _state_left(home: str, name: str, storage_options: Mapping[str, str]) -> str | None:
    """The state of a queue whose table is gone: where its home keeps queues' state
    (``<home>/<queue>``), if a subscriptions table is there."""
    state = home_member(home, name)
    return state if is_table(state_member(state, SUBSCRIPTIONS), storage_options) else None


def _within(inner: str, outer: str) -> bool:
    """Whether ``inner`` is ``outer`` or inside it."""
    inner, outer = inner.rstrip("/"), outer.rstrip("/")
    return inner == outer or inner.startswith(outer + "/")


def _refuse_shared(name: str, locations: list[str], home: str, others: Iterable[str]) -> None:
    """Refuse to remove a location that holds the home or another registered queue, or lies in
    the home's control plane: a queue declared with an odd state location is removed by hand."""
    control = posixpath.join(home, CONTROL_DIR)
    for location in locations:
        shared = next((other for other in (home, control, *others) if _within(other, location)), None)
        if shared is None and _within(location, control):
            shared = control
        if shared is not None:
            raise QueueDeleteRefusedError(name, f"{location} holds {shared} too",
                                          "a queue whose table and state location hold nothing else (remove "
                                          "this one's files by hand)")
