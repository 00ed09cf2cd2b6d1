"""The enqueue sink: a foreachBatch function that writes each micro-batch into its queue(s)
exactly once, and holds the batch's completion while a destination queue is flow-stopped.

Returning from foreachBatch late is what keeps the producer's source offsets from advancing,
as the Qpid broker holds back the completion of Message.Transfer. The sink measures the batch
(messages and bytes per destination), cuts it into chunks of at most ``capacity`` rows with the
gate looked at between chunks, so the depth never exceeds the stop threshold plus the
capacities of the producers (Qpid's capacity window), writes them (:mod:`spark_flow.spark.queue_writer`)
and holds the batch while a destination is stopped. A producer with a publish rate is paced by
the same cut: its chunks are at most one second of its quota, each written once the gate's
limiter lets it start (Pulsar's publish throttling), so the rate holds within a batch too. The
batch's transaction and its rows' handling are :mod:`spark_flow.spark.batch`'s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import ConfigurationError, FlowControlError, HoldInterruptedError, SchemaMismatchError
from spark_flow.flow.conf_record import record_home_conf, record_queue_conf
from spark_flow.flow.gate import Gate
from spark_flow.flow.queue import open_queue
from spark_flow.rules.depth import Depth
from spark_flow.rules.keys import flow_conf, split_options
from spark_flow.rules.settings import producer_settings
from spark_flow.rules.storage_options import storage_options
from spark_flow.spark.batch import BatchContext, cached, conform, measure, message_size, order_key, unpersist
from spark_flow.spark.declare import queue_location
from spark_flow.spark.held_stop import quiet_py4j_stops, raise_as_a_stop
from spark_flow.spark.offsets import flowqueue_offset
from spark_flow.spark.queue_writer import QueueWriter
from spark_flow.spark.session import still_active, streaming_query

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger("spark_flow.spark.sink")

_ROW = "__spark_flow_row"


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did to one queue: enqueued messages and bytes, the depth after,
    flow state, how long the batch was held (flow control) and how long it was throttled (its
    publish rate)."""

    batch_id: int
    queue: str
    count: int
    size: int
    depth: Depth
    flow_stopped: bool
    flow_stopped_count: int
    held_seconds: float
    throttled_seconds: float


class QueueSink:
    """A foreachBatch function that enqueues micro-batches with producer flow control.

    Parameters
    ----------
    queue : str, optional
        The destination queue (path or catalog name). Give ``queue`` or ``route_column``.
    route_column : str, optional
        A column naming each row's destination queue, as an exchange routes. The batch is held
        until every one of its destination queues is flow-OFF (head-of-line blocking).
    size_column : str, optional
        A column holding each message's content size in bytes (it is enqueued like the others).
    options : mapping, optional
        This producer's settings (``capacity``, ``onFull``, ``rejectTimeout``, ``pollInterval``,
        ``msgPublishRate``, ``bytePublishRate``), above the Spark conf. A queue's settings
        (thresholds, policy) are the queue's, the same for every producer: a queue setting here
        raises :class:`QueueSettingError`. Queue settings in the Spark conf that the queue has
        none recorded for are recorded with it at the first batch.
    app_id : str, optional
        The ``txnAppId`` of the batches, the same for every run of the query (default:
        ``spark-flow/<query id>``; required for batches written outside a streaming query).
    query_name : str, optional
        The query's name (``.queryName(...)``). Under Spark Connect a foreachBatch function is
        told nothing of its query: it is the session's active query of this name, or its only
        active query (:func:`enqueue_stream` gives it).

    Examples
    --------
    >>> query = (df.writeStream.foreachBatch(QueueSink("/data/queues/events", options={"capacity": 500}))
    ...          .option("checkpointLocation", "/chk/producer").start())
    """

    def __init__(self, queue: str | None = None, *, route_column: str | None = None,
                 size_column: str | None = None, options: Mapping[str, Any] | None = None,
                 app_id: str | None = None, query_name: str | None = None) -> None:
        if (queue is None) == (route_column is None):
            raise ConfigurationError("queue", queue, "exactly one of queue or route_column")
        _own, self.options, self.conf = split_options(dict(options or {}), ())
        producer_settings(str(queue), self.options, self.conf)  # bad values fail here, not mid-stream
        self.queue = queue
        self.route_column = route_column
        self.size_column = size_column
        self.app_id = app_id
        self.query_name = query_name
        self.last: dict[str, BatchReport] = {}
        self._gates: dict[str, Gate] = {}  # by destination, made at its first batch
        self._writers: dict[str, QueueWriter] = {}  # by destination
        self._session_conf: dict[str, str] | None = None
        self._storage: dict[str, str] = {}  # deltalake storage options, from the session's conf
        self._delta_conf: dict[str, str] = {}  # the session's LogStore settings and application id
        self._consumed: list[tuple[str, str]] | None = None  # (queue, subscription) the query reads
        self._downstream: set[str] = set()  # destinations recorded as their downstream
        self._sizes: dict[str, tuple[Column, tuple[Column, Column]]] = {}  # by schema (JSON)
        quiet_py4j_stops()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self._deliver(batch, batch_id)
        except HoldInterruptedError as stopped:
            raise_as_a_stop(batch.sparkSession, stopped)

    def _deliver(self, batch: DataFrame, batch_id: int) -> None:
        """Enqueue one micro-batch: route, check, measure, refuse or write in chunks, hold."""
        spark = batch.sparkSession
        query = streaming_query(spark, self.query_name, required=self.app_id is None)
        app_id = self.app_id or (f"spark-flow/{query.id}" if query is not None else None)
        if app_id is None:
            raise ConfigurationError("app_id", None, "a stable id for batches written outside a streaming query")
        context = BatchContext(app_id, batch_id, query, still_active(query))
        with ExitStack() as named:
            with cached(batch) as batch:
                parts = self._route(batch)
                gates = {dest: self._gate(spark, dest) for dest in parts}
                for gate in gates.values():  # a deletion racing any step below fails the batch naming the queue
                    named.enter_context(gate.queue.owner.failing_as_gone())
                self._record_downstream(query, gates)
                context.held = dict.fromkeys((gate.queue.path for gate in gates.values()), 0.0)
                context.throttled = dict(context.held)
                rows = self._check(parts, gates)
                measured = {dest: self._measured(part, gates[dest], context) for dest, part in rows.items()}
                self._refuse_before_writing(gates, measured, context)
                enqueued = {dest: self._enqueue(part, dest, gates[dest], measured[dest], context)
                            for dest, part in rows.items()}
            self._hold(context, gates, enqueued)

    def _gate(self, spark: SparkSession, dest: str) -> Gate:
        """The gate of a destination, made at its first batch with its writer: the producer's
        settings parsed once, and the queue settings of the Spark conf recorded with the queue
        (so the queue's other processes judge it with them)."""
        if dest not in self._gates:
            if self._session_conf is None:
                session = dict(spark.conf.getAll)
                self._session_conf = flow_conf(session)
                self._storage = storage_options({**session, **self.conf})
                self._delta_conf = {k: v for k, v in session.items() if k.startswith(("spark.delta.", "spark.app.id"))}
            conf = {**self._session_conf, **self.conf}
            queue = open_queue(queue_location(spark, dest), self._storage)
            self._writers[dest] = QueueWriter(queue, self._storage, self._delta_conf)
            record_queue_conf(queue, conf)
            gate = Gate(queue, producer_settings(queue.name, self.options, conf))
            if gate.home is not None:
                record_home_conf(gate.home, conf)
            self._gates[dest] = gate
        return self._gates[dest]

    def _record_downstream(self, query: StreamingQuery | None, gates: Mapping[str, Gate]) -> None:
        """Record this query's destinations as the downstream of the queue subscriptions it
        reads (from its progress, from its second batch on): held here, that consumer is held
        back by backpressure, and the controller does not take it for stalled."""
        new = [gate.queue.path for gate in gates.values() if gate.queue.path not in self._downstream]
        if not new or query is None:
            return
        if self._consumed is None:
            self._consumed = _consumed(query)
            if self._consumed is None:
                return
        for path, subscription in self._consumed:
            open_queue(path, self._storage).subscriptions.add_downstream(subscription, new)
        self._downstream.update(new)

    def _check(self, parts: Mapping[str, DataFrame], gates: Mapping[str, Gate]) -> dict[str, DataFrame]:
        """Every destination's schema and settings, before the first write: a batch routed to
        several queues is refused whole, never enqueued into some of them. Returns each part
        with its columns in its queue's order."""
        conformed = {}
        for dest, part in parts.items():
            queue = gates[dest].queue
            queue.refresh()
            conformed[dest] = conform(part, queue.spark_schema(), queue.name)
            queue.settings()
        return conformed

    def _route(self, batch: DataFrame) -> dict[str, DataFrame]:
        if self.route_column is None:
            return {str(self.queue): batch}
        from pyspark.sql import functions as F

        if self.route_column not in batch.columns:
            raise SchemaMismatchError(str(self.route_column), self.route_column, batch.schema.simpleString(),
                                      f"route column {self.route_column!r} is not in the batch")
        column = F.col(f"`{self.route_column}`")
        destinations = [r[0] for r in batch.select(column).distinct().collect()]
        if None in destinations:
            raise SchemaMismatchError(str(self.route_column), "a queue name", "null",
                                      f"route column {self.route_column!r} is null in some rows")
        return {d: batch.filter(column == d).drop(self.route_column) for d in sorted(destinations)}

    def _measured(self, rows: DataFrame, gate: Gate, context: BatchContext) -> tuple[int, int, int]:
        """One queue's part of the batch: its messages, bytes, and how many of its messages
        an earlier run of this batch wrote (a replay)."""
        _size, totals = self._message_size(rows.schema)
        count, total_size = measure(rows, totals)
        return count, total_size, context.written(gate.queue.transaction_version(context.app_id))

    def _refuse_before_writing(self, gates: Mapping[str, Gate], measured: Mapping[str, tuple[int, int, int]],
                               context: BatchContext) -> None:
        """Ask every destination's gate whether it refuses the batch, before the first write."""
        for dest, gate in gates.items():
            count, total_size, done = measured[dest]
            if done < count:
                context.held[gate.queue.path] += gate.refuse(Depth(count, total_size), context.is_active)

    def _enqueue(self, rows: DataFrame, dest: str, gate: Gate, measured: tuple[int, int, int],
                 context: BatchContext) -> Depth:
        """Write one queue's part of the batch (its columns conformed), in chunks when flow
        control asks for it.

        Returns the messages and bytes of the part (already enqueued ones included)."""
        size, _totals = self._message_size(rows.schema)
        count, total_size, done = measured
        if done >= count:
            if count:
                log.info("batch %d already enqueued into %r (replay); skipping its write", context.batch_id,
                         gate.queue.name)
            return Depth(count, total_size)
        batch = Depth(count, total_size)
        window = self._admit(gate, context, done, batch)
        if done == 0 and count <= window:
            self._throttle(gate, context, batch)
            self._write(rows, dest, context, count, count, total_size)
        else:
            self._write_chunks(rows, size, dest, int(min(count - done, window)), context, done, batch)
        gate.make_room()
        return Depth(count, total_size)

    def _message_size(self, schema: StructType) -> tuple[Column, tuple[Column, Column]]:
        """:func:`message_size` of a schema and the batch's (count, size) aggregates, built once:
        they cost a py4j call per column and function."""
        from pyspark.sql import functions as F

        key = schema.json()
        if key not in self._sizes:
            size = message_size(schema, self.size_column)
            self._sizes[key] = size, (F.count(F.lit(1)).alias("count"), F.coalesce(F.sum(size), F.lit(0)).alias("size"))
        return self._sizes[key]

    def _write_chunks(self, rows: DataFrame, size: Column, dest: str, window: int, context: BatchContext,
                      done: int, batch: Depth) -> None:
        """Write rows ``done..count`` of the ``batch``'s ``count`` in chunks of ``window`` rows
        (fixed for the batch), the gate asked before each chunk after the first and each chunk
        paced by the publish rate. One job sizes every chunk; one write per chunk."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        keys = [order_key(f.name, f.dataType) for f in rows.schema.fields]
        order = Window.orderBy(F.xxhash64(*keys), *keys)
        indexed = rows.withColumn(_ROW, F.row_number().over(order) - 1).persist()
        chunk_of = F.floor((F.col(_ROW) - done) / window)
        gate, count = self._gates[dest], batch.count
        try:
            sizes: dict[int, int] = dict(indexed.filter(F.col(_ROW) >= done).groupBy(chunk_of.alias("chunk"))
                         .agg(F.coalesce(F.sum(size), F.lit(0))).collect())
            for chunk_index in range(math.ceil((count - done) / window)):
                lo, hi = done + chunk_index * window, min(count, done + (chunk_index + 1) * window)
                if chunk_index:
                    self._admit(gate, context, lo, batch)
                self._throttle(gate, context, Depth(hi - lo, sizes[chunk_index]))
                chunk = indexed.filter((F.col(_ROW) >= lo) & (F.col(_ROW) < hi)).drop(_ROW)
                self._write(chunk, dest, context, hi, hi - lo, sizes[chunk_index])
        finally:
            unpersist(indexed)

    def _admit(self, gate: Gate, context: BatchContext, written: int, batch: Depth) -> float:
        """:meth:`Gate.admit` for the rest of a ``batch`` of which ``written`` messages are in: a
        refusal says so, and that a restart writes the rest (the replay skips what is in).
        Returns the window."""
        count = batch.count
        try:
            held, window = gate.admit(batch, context.is_active, started=written > 0)
            context.held[gate.queue.path] += held
            return window
        except FlowControlError as error:
            if not written:
                raise
            raise type(error)(error.queue, error.depth, error.thresholds,
                              f"{error.detail}; {written} of the {count} messages of batch {context.batch_id} are "
                              f"in queue {error.queue!r}; a restart of the query writes the other "
                              f"{count - written}") from error

    def _throttle(self, gate: Gate, context: BatchContext, write: Depth) -> None:
        """Wait until the producer's publish rate and its queue's pace let the next write start
        (:meth:`Gate.throttle`)."""
        context.throttled[gate.queue.path] += gate.throttle(write, context.is_active, context.app_id)

    def _write(self, rows: DataFrame, dest: str, context: BatchContext, written: int, count: int, size: int) -> None:
        """Append ``count`` rows (``size`` bytes) as one idempotent commit that brings the
        batch's messages in this queue to ``written``."""
        path, weight = self._writers[dest].queue.path, self._gates[dest].producer.pacing_weight
        self._writers[dest].append(rows, context.app_id, context.txn_version(written),
                                   context.commit_metadata(path, count, size, weight))

    def _hold(self, context: BatchContext, gates: Mapping[str, Gate], enqueued: Mapping[str, Depth]) -> None:
        """Complete the batch only when every destination queue is flow-OFF in one pass."""
        after_writes = dict.fromkeys(gates, 0.0)
        while True:
            statuses = {}
            for dest, gate in gates.items():
                statuses[dest], seconds = gate.complete(context.is_active)
                after_writes[dest] += seconds
            if not context.is_active() or not any(gates[dest].holds(status) for dest, status in statuses.items()):
                break
        for dest, seconds in after_writes.items():
            if seconds > 0 and context.query_id is not None and enqueued[dest].count:
                gates[dest].queue.hold_times.record(context.query_id, context.batch_id, round(seconds, 3))
        for dest, status in statuses.items():
            path = gates[dest].queue.path
            self.last[dest] = BatchReport(context.batch_id, status.queue, enqueued[dest].count, enqueued[dest].size,
                                          status.depth, status.held, status.flow_stopped_count,
                                          context.held[path] + after_writes[dest], context.throttled[path])


def _consumed(query: StreamingQuery) -> list[tuple[str, str]] | None:
    """The flowqueue subscriptions a query reads, from its last progress; None before it has one."""
    progress = query.lastProgress
    if progress is None:
        return None
    offsets = [flowqueue_offset(source.endOffset) for source in progress.sources]
    return [(offset["queue"], offset["subscription"]) for offset in offsets if offset is not None]


def enqueue_stream(df: DataFrame, queue: str | None, checkpoint_location: str, *,
                   trigger: Mapping[str, Any] | None = None, query_name: str | None = None,
                   **sink_options: Any) -> StreamingQuery:
    """Start a streaming query that enqueues ``df`` into ``queue`` with flow control.

    ``trigger`` takes ``DataStreamWriter.trigger`` keywords (``{"processingTime": "1 second"}``);
    other keywords go to :class:`QueueSink` (the query's name too: under Spark Connect that is
    how the sink finds its query).
    """
    writer = df.writeStream.foreachBatch(QueueSink(queue, query_name=query_name, **sink_options)).option(
        "checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
