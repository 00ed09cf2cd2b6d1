"""Flow control in query progress: a StreamingQueryListener that reports, for each producer and
consumer query, the queue's depth, ``flowStopped``, ``flowStoppedCount``, the time held and the
time throttled.

Everything comes from what every process can read, so the listener works in the process that
runs the queries (classic) and in a Spark Connect client, whose foreachBatch functions run on
the server: consumers are found by their ``flowqueue`` offsets, which name the queue and
subscription; producers by the commits of the queues it watches, whose ``userMetadata`` names
the query and micro-batch that wrote them (:class:`~spark_flow.spark.sink.QueueSink` writes it).
A queue that is gone (deleted, dropped) is reported nothing for, logged once: its own queries
fail with :class:`~spark_flow.exceptions.QueueNotFoundError`, the listener goes on for the rest.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from spark_flow.exceptions import QueueNotFoundError
from spark_flow.flow.gate import GateStatus
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.records.home import Registry
from spark_flow.rules.depth import Commit
from spark_flow.rules.flow_state import FlowState
from spark_flow.rules.names import normalize_path
from spark_flow.spark.delivery import Delivery
from spark_flow.spark.offsets import flowqueue_offset, offset_position
from spark_flow.spark.session import close_before_stop, session_storage_options

log = logging.getLogger("spark_flow.spark.listener")

_LOOK_BACK = 16  # commits read per step when a queue is first looked at
_KEEP_MS = 600_000  # commits of queries with no event here (other applications) are dropped after
_connect_listeners: set[ClosingListener] = set()  # added to a Connect session, not closed yet


def close_connect_listeners() -> None:
    """Close every listener added to a Spark Connect session and not closed yet. Run when a
    client's script ends, and by :func:`~spark_flow.spark.session.exit_process` before it stops the
    session: a listener stream that stop cuts makes PySpark's listener thread warn
    ("StreamingQueryListenerBus Handler thread received exception") in a job that did nothing
    wrong."""
    for listener in list(_connect_listeners):
        listener.close()


def _remove_from_connect_bus(streams: Any, listener: StreamingQueryListener) -> None:
    """``streams.removeListener(listener)`` of a Spark Connect session, without PySpark 4.2's
    deadlock (SPARK-59623): its removal of the last listener waits for the event thread while
    holding the lock that thread takes to deliver an event, so an event arriving meanwhile (a
    query's termination just after its stop) hangs the client for good. As that fix does, the
    server is asked to end the event stream under the lock, the thread waited for outside it."""
    import pyspark.sql.connect.proto as pb2

    bus = streams._sqlb
    with bus._lock:
        if listener not in bus._listener_bus:
            return
        if len(bus._listener_bus) > 1:
            bus._listener_bus.remove(listener)
            return
        thread = bus._execution_thread
        command = pb2.Command(streaming_query_listener_bus_command=pb2.StreamingQueryListenerBusCommand(
            remove_listener_bus_listener=True))
        try:
            streams._session.client.execute_command(command)
        except Exception as error:  # as PySpark's own removal: the server is gone, its stream with it
            warnings.warn(f"Failed to remove the listener because of exception: {error}", stacklevel=2)
            return
    if thread is not None:
        thread.join()  # the server's last events delivered, the stream ended
    with bus._lock:
        if listener in bus._listener_bus:
            bus._listener_bus.remove(listener)
        if bus._execution_thread is thread:
            bus._execution_thread = None


@functools.cache
def _close_connect_listeners_at_exit() -> None:
    """Have :func:`close_connect_listeners` run when the script ends, and before
    :func:`~spark_flow.spark.session.exit_process` stops the session. Python joins non-daemon threads
    (PySpark's listener thread is one) before ``atexit`` functions run, so it goes in the list
    of ``threading``'s own exit calls, run before that join (where ``concurrent.futures`` stops
    its workers)."""
    close_before_stop(close_connect_listeners)
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        with contextlib.suppress(RuntimeError):  # added while the interpreter shuts down: nothing to wait for
            register(close_connect_listeners)


class ClosingListener(StreamingQueryListener):
    """A listener spark-flow adds or a user adds, removed again when the script or job ends."""

    def close(self) -> None:
        """Stop listening: remove the listener from its session's queries. Under Spark Connect
        this also ends PySpark's listener thread, which is not a daemon: a client script that
        added a listener and never removed it does not exit (its interpreter waits for that
        thread at the end). spark-flow calls it for you when a Connect client's script ends, and
        in :func:`~spark_flow.spark.session.exit_process` before the session stops."""
        from pyspark.sql import SparkSession

        connect = self in _connect_listeners
        _connect_listeners.discard(self)
        spark = self.spark or SparkSession.getActiveSession()
        if spark is None or getattr(spark, "is_stopped", False):
            return
        if connect:
            _remove_from_connect_bus(spark.streams, self)
        else:
            spark.streams.removeListener(self)

    def _set_spark_session(self, session: Any) -> None:
        """PySpark's hook when the listener is added under Spark Connect (``addListener``): have
        :meth:`close` run when the client's script or job ends."""
        super()._set_spark_session(session)
        _connect_listeners.add(self)
        _close_connect_listeners_at_exit()


@dataclass(frozen=True)
class FlowProgress:
    """Flow control as one query saw it in its last micro-batch: the messages it enqueued (a
    producer) or took (a consumer: each message once), the queue version it wrote or read up to,
    and the depth after it (a consumer's: what remains once the batch is acknowledged). A
    producer's ``held_seconds`` is the time flow control held its batch, ``throttled_seconds``
    the time its publish rate paced it. A consumer's ``processed`` are the messages its function
    processed (all it took but those moved to the dead-letter queue), ``redelivered`` the
    deliveries after the first of a batch :class:`~spark_flow.spark.dead_letters.DeadLetters`
    delivered again in parts: Spark's ``numInputRows`` counts those too (and any other read of
    the batch that is not cached)."""

    query_id: str
    query_name: str | None
    role: str  # "producer" or "consumer"
    queue: str
    subscription: str | None
    batch_id: int
    depth_count: int
    depth_size: int
    flow_stopped: bool
    flow_stopped_count: int
    held_seconds: float
    throttled_seconds: float = 0.0
    count: int = 0
    position: int = -1  # a consumer's: the queue version of the newest message it has read
    expired_count: int = 0  # a consumer's subscription's: messages expired (messageTtl) before it read them
    dead_lettered_count: int = 0  # a consumer's subscription's: messages moved to the dead-letter queue
    processed: int = 0  # a consumer's: messages of the batch its function processed
    redelivered: int = 0  # a consumer's: deliveries of the batch's messages after the first (DeadLetters)


class FlowProgressListener(ClosingListener):
    """Keeps the last :class:`FlowProgress` of every query that produces to or consumes from a
    queue, and logs it (logger ``spark_flow.spark.listener``) at every progress event.

    Parameters
    ----------
    queues : iterable of str, optional
        Paths of the queues whose producers to report.
    home : str, optional
        A ``spark.flow.home``: the producers of every queue registered there are reported too.
    storage_options : mapping, optional
        deltalake's, for queues on object storage; by default those of the session active when
        the listener is made.

    Consumers of any queue are reported without either. A producer's ``held_seconds`` is the
    time its batch waited before and between its writes (recorded in its commits) and after
    them (recorded in the queue's holds table, only when it held); its ``throttled_seconds``
    the time its publish rate made its writes wait (recorded in its commits).

    Examples
    --------
    >>> listener = FlowProgressListener(queues=["/data/queues/events"])
    >>> spark.streams.addListener(listener)
    >>> listener.progress[str(query.id)]   # [FlowProgress(role='producer', queue='events', ...)]
    """

    def __init__(self, queues: Iterable[str] = (), home: str | None = None,
                 storage_options: Mapping[str, str] | None = None) -> None:
        self.progress: dict[str, list[FlowProgress]] = {}
        if storage_options is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
            storage_options = session_storage_options(spark) if spark is not None else {}
        self.storage_options = dict(storage_options)
        self._paths = [normalize_path(path) for path in queues]
        self._registry = Registry(home, self.storage_options) if home else None
        self._seen: dict[str, int] = {}  # by queue path: the newest version looked at
        self._commits: dict[str, list[Commit]] = {}  # by queue path: sink commits not yet reported
        self._gone: set[str] = set()  # queue paths found gone, logged once

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        """Nothing is known before the first batch."""

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """An idle query keeps its last progress."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """A stopped query's last progress stays, for the post-mortem."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        query_id, name = str(progress.id), progress.name
        found = self.reports(progress)
        if found:
            self.progress[query_id] = found
        for flow in found:
            log.info("%s %s batch %d queue %r%s: %d messages%s, depth %d messages / %d bytes, flowStopped %s, "
                     "flowStoppedCount %d, held %.1fs, throttled %.1fs", flow.role, name or query_id, flow.batch_id,
                     flow.queue, f" subscription {flow.subscription!r}" if flow.subscription else "", flow.count,
                     f" ({flow.processed} processed, {flow.redelivered} redelivered)" if flow.redelivered else "",
                     flow.depth_count, flow.depth_size, str(flow.flow_stopped).lower(), flow.flow_stopped_count,
                     flow.held_seconds, flow.throttled_seconds)

    def reports(self, progress: Any) -> list[FlowProgress]:
        """Flow control of one micro-batch (a ``StreamingQueryProgress``), as a producer and as a
        consumer of queues."""
        return self._producers(progress) + self._consumers(progress)

    def in_flight(self, query_id: str, since: datetime) -> list[FlowProgress]:
        """The batch a producer query has written to its queues and not completed (held, or cut
        short by its query's stop: a restart from the checkpoint finishes it), as the queues have
        it now; ``since`` is when the query started. Its ``held_seconds`` are those before its
        last write."""
        found = []
        for path, pending in self._pending(int(since.timestamp() * 1000)):
            mine = [c for c in pending if c.query == query_id and c.batch is not None]
            batch = max((c.batch for c in mine if c.batch is not None), default=None)
            if batch is not None:
                found.append(self._report(open_queue(path, self.storage_options), query_id, None, batch,
                                          [c for c in mine if c.batch == batch], 0.0))
        return found

    def _producers(self, progress: Any) -> list[FlowProgress]:
        """The queues this micro-batch wrote, from their commits that name its query and batch."""
        query_id, batch_id = str(progress.id), progress.batchId
        started = int(datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp() * 1000)
        found = []
        for path, pending in self._pending(started):
            mine = [c for c in pending if c.query == query_id and c.batch == batch_id]
            self._commits[path] = [c for c in pending if c.timestamp >= started - _KEEP_MS and
                                   not (c.query == query_id and c.batch is not None and c.batch <= batch_id)]
            if mine:
                queue = open_queue(path, self.storage_options)
                found.append(self._report(queue, query_id, progress.name, batch_id, mine,
                                          queue.hold_times.seconds(query_id, batch_id)))
        return found

    def _pending(self, since: int) -> list[tuple[str, list[Commit]]]:
        """Each watched queue with the sink commits not reported yet (those from ``since``, ms,
        at a queue's first look)."""
        paths = self._paths + sorted(set((self._registry.queues() if self._registry else {}).values()) -
                                     set(self._paths))
        looked = []
        for path in paths:
            queue = self._open(path)
            if queue is not None:
                self._commits[path] = self._commits.get(path, []) + self._new_commits(queue, since)
                looked.append((path, self._commits[path]))
        return looked

    def _open(self, path: str) -> Queue | None:
        """The queue at ``path`` caught up with its log, None (logged once) when it is gone."""
        try:
            queue = open_queue(path, self.storage_options)
            queue.refresh()
        except QueueNotFoundError as error:
            if path not in self._gone:
                self._gone.add(path)
                log.warning("not reporting queue %s: %s", path, error)
            return None
        self._gone.discard(path)
        return queue

    @staticmethod
    def _report(queue: Queue, query_id: str, name: str | None, batch_id: int, commits: list[Commit],
                held_after: float) -> FlowProgress:
        """A producer's report of one batch from its commits to ``queue`` and the queue's state."""
        status, last = _status(queue), commits[-1]
        return FlowProgress(query_id, name, "producer", queue.name, None, batch_id, status.depth.count,
                            status.depth.size, status.held, status.flow_stopped_count,
                            round(last.held + held_after, 3), last.throttled, sum(c.count for c in commits),
                            last.version)

    def _new_commits(self, queue: Queue, since: int) -> list[Commit]:
        """The sink's commits to a queue since the last look. At the first look, those from
        ``since`` (ms) on: the micro-batch that brought the queue to this listener's notice
        (``queue`` is caught up: :meth:`_open`)."""
        latest = queue.version()
        after = self._seen.get(queue.path)
        self._seen[queue.path] = latest
        if after is not None:
            return [c for c in queue.ledger.commits(after, latest) if c.query is not None]
        after = latest
        while after >= 0:
            after = max(-1, after - _LOOK_BACK)
            if any(c.timestamp < since for c in queue.ledger.commits(after, after + _LOOK_BACK)):
                break
        return [c for c in queue.ledger.commits(after, latest) if c.query is not None and c.timestamp >= since]

    def _consumers(self, progress: Any) -> list[FlowProgress]:
        """The subscriptions this query reads, named by its flowqueue offsets."""
        found = []
        for source in progress.sources:
            offset = flowqueue_offset(source.endOffset)
            queue = self._open(offset["queue"]) if offset is not None else None
            if offset is not None and queue is not None:
                latest = queue.version()
                sub = queue.subscriptions.get(offset["subscription"])
                end = offset_position(offset)
                depth = queue.ledger.depth(max(sub.acknowledged, end), latest)
                taken, processed, redelivered = _taken(sub.delivery, progress.batchId, int(source.numInputRows))
                found.append(FlowProgress(str(progress.id), progress.name, "consumer", queue.name, sub.name,
                                          progress.batchId, depth.count, depth.size, sub.flow_stopped,
                                          sub.flow_stopped_count, 0.0, 0.0, taken, end.reached, sub.expired_count,
                                          sub.dead_lettered_count, processed, redelivered))
        return found


def _taken(delivery: str | None, batch_id: int, input_rows: int) -> tuple[int, int, int]:
    """A consumer batch's messages taken, processed and delivered again: as its subscription's
    delivery records them for a batch :class:`~spark_flow.spark.dead_letters.DeadLetters`
    delivered again in parts (Spark's ``numInputRows`` counts every delivery, and the read
    that numbers the batch), else Spark's ``numInputRows`` (one read of each message)."""
    report = Delivery.parse(delivery).report(batch_id)
    if report is None:
        return input_rows, input_rows, 0
    return report.taken, report.processed, report.redelivered


def _status(queue: Queue) -> GateStatus:
    """The queue as its producers see it now (depths and recorded flow states), without stepping
    the state machine: the listener reports, it does not decide."""
    backlog = queue.backlog()
    states = {sub.name: FlowState(sub.flow_stopped, sub.flow_stopped_count) for sub, _ in backlog}
    return GateStatus(queue.name, queue.settings(), {sub.name: depth for sub, depth in backlog}, states)
