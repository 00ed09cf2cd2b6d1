"""The enqueue sink: a foreachBatch function that writes each micro-batch into its queue(s)
exactly once, and holds the batch's completion while a destination queue is flow-stopped.

Returning from foreachBatch late is what keeps the producer's source offsets from advancing,
as the Qpid broker holds back the completion of Message.Transfer.

Exactly once: each commit carries ``txnAppId`` (the query id) and ``txnVersion`` =
``batchId * 2**32 + rows written so far``, so after a crash the replayed batch learns from the
queue's log how many of its rows are in, skips them and writes the rest. A batch larger than the
producer's ``capacity`` is written in chunks of at most ``capacity`` rows with the gate looked
at between chunks, so the depth never exceeds the stop threshold plus the capacities of the
producers (Qpid's capacity window); its rows are put in a content-determined order first, so a
replay cuts the same chunks.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from spark_flow.appends import DirectAppender
from spark_flow.config import flow_conf, producer_settings, split_options
from spark_flow.exceptions import (
    ConfigurationError,
    FlowControlError,
    SchemaMismatchError,
)
from spark_flow.gate import Gate
from spark_flow.ledger import METADATA_KEY, Depth
from spark_flow.queue import Queue, open_queue, queue_location
from spark_flow.session import is_connect, still_active, streaming_query
from spark_flow.source import flowqueue_offset
from spark_flow.storage import storage_options
from spark_flow.subscriptions import PROCESS
from spark_flow.writers import WriterClaim, needs_claim

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("spark_flow.sink")

TXN_SPAN = 2**32
_ROW = "__spark_flow_row"
_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"
_WRITE_RETRIES = 10

@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did to one queue: enqueued messages and bytes, the depth after,
    flow state, and how long the batch was held."""

    batch_id: int
    queue: str
    count: int
    size: int
    depth: Depth
    flow_stopped: bool
    flow_stopped_count: int
    held_seconds: float


def message_size(schema: StructType, size_column: str | None = None) -> Column:
    """The content size of a message in bytes, per row.

    With ``size_column``, that column's value. Otherwise the sum over the columns of: the UTF-8
    bytes of strings and the bytes of binaries, the JSON bytes of structs, arrays and maps, and
    the fixed width of other types (Spark's ``defaultSize``: 8 for a long or a timestamp, 4 for
    an int, 8 otherwise); nulls count 0.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

    if size_column is not None:
        return F.coalesce(F.col(size_column).cast("long"), F.lit(0))
    terms = []
    for field in schema.fields:
        column, kind = F.col(f"`{field.name}`"), field.dataType
        if isinstance(kind, (StringType, BinaryType)):
            term = F.octet_length(column)
        elif isinstance(kind, (StructType, ArrayType, MapType)):
            term = F.octet_length(F.to_json(column))
        else:
            term = F.when(column.isNotNull(), F.lit(_fixed_width(kind)))
        terms.append(F.coalesce(term.cast("long"), F.lit(0)))
    return reduce(lambda a, b: a + b, terms, F.lit(0).cast("long"))


def _fixed_width(kind: Any) -> int:
    """Bytes of a fixed-width value, as Spark's ``DataType.defaultSize``."""
    from pyspark.sql import types as T

    if isinstance(kind, T.DecimalType):
        return 8 if kind.precision <= 18 else 16
    widths = {T.ByteType: 1, T.BooleanType: 1, T.ShortType: 2, T.IntegerType: 4, T.FloatType: 4,
              T.DateType: 4, T.LongType: 8, T.DoubleType: 8, T.TimestampType: 8, T.TimestampNTZType: 8}
    return widths.get(type(kind), 8)


def conform(batch: DataFrame, expected: StructType, queue: str) -> DataFrame:
    """The batch's columns in the queue's order; raises before any write if they differ.

    Types are compared as Delta's append compares them: nullability (of a column, an array's
    elements, a map's values, a struct's fields) may differ, and a null-only (void) column takes
    the queue column's type."""
    from pyspark.sql.types import NullType

    have = {f.name: f.dataType for f in batch.schema.fields}
    want = {f.name: f.dataType for f in expected.fields}
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    wrong = [f"{n} is {have[n].simpleString()}, queue has {want[n].simpleString()}"
             for n in want if n in have and not isinstance(have[n], NullType)
             and _nullable(have[n]) != _nullable(want[n])]
    if missing or extra or wrong:
        detail = "; ".join(
            part for part in (
                f"missing columns {missing}" if missing else "",
                f"unknown columns {extra}" if extra else "",
                "; ".join(wrong),
            ) if part
        )
        raise SchemaMismatchError(queue, expected.simpleString(), batch.schema.simpleString(), detail)
    void = [n for n in want if isinstance(have[n], NullType)]
    if list(have) == list(want) and not void:
        return batch
    from pyspark.sql import functions as F

    return batch.select(*[F.col(f"`{n}`").cast(want[n]).alias(n) if n in void else F.col(f"`{n}`") for n in want])


def _nullable(kind: DataType) -> DataType:
    """``kind`` with every nested field, element and value nullable."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(kind, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return ArrayType(_nullable(kind.elementType), True)
    if isinstance(kind, MapType):
        return MapType(_nullable(kind.keyType), _nullable(kind.valueType), True)
    return kind


def _order_key(name: str, kind: DataType) -> Column:
    """A column that orders rows by ``name``'s content: the column itself, or, for types Spark
    cannot hash or sort (maps, variants, anything holding one), its JSON with microseconds."""
    from pyspark.sql import functions as F

    column = F.col(f"`{name}`")
    if not any(word in kind.simpleString() for word in ("map<", "variant")):
        return column
    return F.to_json(column, {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                              "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"})


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
        This producer's settings (``capacity``, ``onFull``, ``rejectTimeout``, ``pollInterval``),
        above the Spark conf. A queue's settings (thresholds, policy) are the queue's, the same
        for every producer: a queue setting here raises :class:`QueueSettingError`. Queue settings
        in the Spark conf that the queue has none recorded for are recorded with it at the
        first batch.
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
        self._session_conf: dict[str, str] | None = None
        self._storage: dict[str, str] = {}  # deltalake storage options, from the session's conf
        self._delta_conf: dict[str, str] = {}  # the session's LogStore settings and application id
        self._claims: dict[str, WriterClaim] = {}  # by queue path: queues one application may write
        self._consumed: list[tuple[str, str]] | None = None  # (queue, subscription) the query reads
        self._downstream: set[str] = set()  # destinations recorded as their downstream
        self._held: dict[str, float] = {}  # seconds the current batch was held, per queue path
        self._query_id: str | None = None  # the query running the current batch, in its commits
        self._sizes: dict[str, tuple[Column, tuple[Column, Column]]] = {}  # by schema (JSON)
        self._appenders: dict[str, DirectAppender] = {}  # by queue path
        self._delta_writer: set[str] = set()  # queues whose tables need Delta's writer (logged)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        query = streaming_query(spark, self.query_name, required=self.app_id is None)
        query_id = self._query_id = str(query.id) if query is not None else None
        app_id = self.app_id or (f"spark-flow/{query_id}" if query_id else None)
        if app_id is None:
            raise ConfigurationError("app_id", None, "a stable id for batches written outside a streaming query")
        is_active = still_active(query)
        with _cached(batch) as batch:
            parts = self._route(batch)
            gates = {dest: self._gate(spark, dest) for dest in parts}
            self._record_downstream(query, gates)
            self._held = dict.fromkeys((gate.queue.path for gate in gates.values()), 0.0)
            rows = self._check(parts, gates)
            measured = {dest: self._measured(part, gates[dest].queue, app_id, batch_id) for dest, part in rows.items()}
            self._refuse_before_writing(gates, measured, is_active)
            enqueued = {dest: self._enqueue(part, gates[dest], measured[dest], app_id, batch_id, is_active)
                        for dest, part in rows.items()}
        self._hold(batch_id, gates, enqueued, is_active)

    def _gate(self, spark: SparkSession, dest: str) -> Gate:
        """The gate of a destination, made at its first batch: the producer's settings parsed
        once, and the queue settings of the Spark conf recorded with the queue (so the queue's
        other processes judge it with them)."""
        if dest not in self._gates:
            if self._session_conf is None:
                session = dict(spark.conf.getAll)
                self._session_conf = flow_conf(session)
                self._storage = storage_options({**session, **self.conf})
                self._delta_conf = {k: v for k, v in session.items() if k.startswith(("spark.delta.", "spark.app.id"))}
            conf = {**self._session_conf, **self.conf}
            queue = open_queue(queue_location(spark, dest), self._storage)
            if needs_claim(queue.path, self._delta_conf):  # before this application writes anything there
                self._claims[queue.path] = WriterClaim(
                    posixpath.join(queue.state_location, "writers"), queue.name, queue.path,
                    self._delta_conf.get("spark.app.id") or PROCESS, self._storage)
                self._claims[queue.path].hold()
            queue.record_conf(conf)
            gate = Gate(queue, producer_settings(queue.name, self.options, conf))
            if gate.home is not None:
                gate.home.record_conf(conf)
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
            return {self.queue: batch}  # type: ignore[dict-item]
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

    def _measured(self, rows: DataFrame, queue: Queue, app_id: str, batch_id: int) -> tuple[int, int, int]:
        """One queue's part of the batch: its messages, bytes, and how many of its messages
        an earlier run of this batch wrote (a replay)."""
        _size, totals = self._message_size(rows.schema)
        count, total_size = _measure(rows, totals)
        last = queue.transaction_version(app_id)
        base = batch_id * TXN_SPAN
        return count, total_size, last - base if last is not None and last >= base else 0

    def _refuse_before_writing(self, gates: Mapping[str, Gate], measured: Mapping[str, tuple[int, int, int]],
                               is_active: Callable[[], bool]) -> None:
        """Ask every destination's gate whether it refuses the batch, before the first write."""
        for dest, gate in gates.items():
            count, total_size, done = measured[dest]
            if done < count:
                self._held[gate.queue.path] += gate.refuse(Depth(count, total_size), is_active)

    def _enqueue(self, rows: DataFrame, gate: Gate, measured: tuple[int, int, int], app_id: str, batch_id: int,
                 is_active: Callable[[], bool]) -> Depth:
        """Write one queue's part of the batch (its columns conformed), in chunks when flow
        control asks for it.

        Returns the messages and bytes of the part (already enqueued ones included)."""
        queue = gate.queue
        size, _totals = self._message_size(rows.schema)
        count, total_size, done = measured
        base = batch_id * TXN_SPAN
        if done >= count:
            if count:
                log.info("batch %d already enqueued into %r (replay); skipping its write", batch_id, queue.name)
            return Depth(count, total_size)
        window = self._admit(gate, is_active, batch_id, done, count)
        if done == 0 and count <= window:
            self._write(rows, queue, app_id, base + count, count, total_size, batch_id)
        else:
            self._write_chunks(rows, size, gate, int(min(count - done, window)), app_id, batch_id, done, count,
                               is_active)
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

    def _write_chunks(self, rows: DataFrame, size: Column, gate: Gate, window: int, app_id: str,
                      batch_id: int, done: int, count: int, is_active: Callable[[], bool]) -> None:
        """Write rows ``done..count`` in chunks of ``window`` rows (fixed for the batch), the
        gate asked before each chunk after the first. One job sizes every chunk; one write per
        chunk."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        keys = [_order_key(f.name, f.dataType) for f in rows.schema.fields]
        order = Window.orderBy(F.xxhash64(*keys), *keys)
        indexed = rows.withColumn(_ROW, F.row_number().over(order) - 1).persist()
        chunk_of = F.floor((F.col(_ROW) - done) / window)
        try:
            sizes = dict(indexed.filter(F.col(_ROW) >= done).groupBy(chunk_of.alias("chunk"))
                         .agg(F.coalesce(F.sum(size), F.lit(0))).collect())
            for chunk_index in range(math.ceil((count - done) / window)):
                lo, hi = done + chunk_index * window, min(count, done + (chunk_index + 1) * window)
                if chunk_index:
                    self._admit(gate, is_active, batch_id, lo, count)
                chunk = indexed.filter((F.col(_ROW) >= lo) & (F.col(_ROW) < hi)).drop(_ROW)
                self._write(chunk, gate.queue, app_id, batch_id * TXN_SPAN + hi, hi - lo,
                            sizes[chunk_index], batch_id)
        finally:
            _unpersist(indexed)

    def _admit(self, gate: Gate, is_active: Callable[[], bool], batch_id: int, written: int,
               count: int) -> float:
        """:meth:`Gate.admit` for the rest of a batch ``written`` of whose ``count`` messages are
        in: a refusal says so, and that a restart writes the rest (the replay skips what is in).
        Returns the window."""
        try:
            held, window = gate.admit(is_active, started=written > 0)
            self._held[gate.queue.path] += held
            return window
        except FlowControlError as error:
            if not written:
                raise
            raise type(error)(error.queue, error.depth, error.thresholds,
                              f"{error.detail}; {written} of the {count} messages of batch {batch_id} are in queue "
                              f"{error.queue!r}; a restart of the query writes the other {count - written}") from error

    def _write(self, rows: DataFrame, queue: Queue, app_id: str, txn_version: int, count: int, size: int,
               batch_id: int) -> None:
        """Append rows as one idempotent commit. A metadata commit on the queue at the same time
        (ALTER TBLPROPERTIES, a declare, a process recording its conf's settings) fails the append
        with Delta's MetadataChangedException; the append is tried again, and its ``txnVersion``
        makes sure it is written once.

        The commit's ``userMetadata`` holds its messages and bytes (the ledger's depth), and the
        query, batch and seconds held so far (a query listener's report, in whatever process).
        A table that needs nothing of Delta's writer is appended to as Parquet files and a
        deltalake commit (:mod:`spark_flow.appends`), with the same transaction and metadata."""
        metadata = json.dumps({METADATA_KEY: {"count": int(count), "size": int(size), "producer": app_id,
                                              "batch": batch_id, "query": self._query_id,
                                              "held": round(self._held[queue.path], 3)}})
        if queue.path in self._claims:  # only one application may write it: renew this one's claim
            self._claims[queue.path].hold()
        if self._direct_append(queue, rows, app_id, txn_version, metadata):
            return
        conflicts = _commit_conflicts(rows.sparkSession)
        writer = (rows.write.format("delta").mode("append").option("txnAppId", app_id)
                  .option("txnVersion", str(txn_version)).option("userMetadata", metadata))
        for attempt in itertools.count():
            try:
                writer.save(queue.path)
                return
            except conflicts as error:
                if attempt >= _WRITE_RETRIES:
                    raise
                log.info("queue %r: its metadata changed during batch %d's append (%s); appending again",
                         queue.name, batch_id, type(error).__name__)
                time.sleep(min(0.05 * 2**attempt, 1.0))

    def _direct_append(self, queue: Queue, rows: DataFrame, app_id: str, txn_version: int, metadata: str) -> bool:
        """Append as Parquet files and a deltalake commit when the queue's table allows it;
        False when it needs Delta's writer (the reason logged once per queue)."""
        appender = self._appenders.get(queue.path)
        if appender is None:
            appender = self._appenders[queue.path] = DirectAppender(queue.path, self._storage)
        if appender.append(rows, app_id, txn_version, metadata):
            return True
        if queue.path not in self._delta_writer:
            self._delta_writer.add(queue.path)
            log.info("queue %r is appended to by Delta's writer: its table has %s", queue.name, appender.refusal())
        return False

    def _hold(self, batch_id: int, gates: Mapping[str, Gate], enqueued: Mapping[str, Depth],
              is_active: Callable[[], bool]) -> None:
        """Complete the batch only when every destination queue is flow-OFF in one pass."""
        after_writes = dict.fromkeys(gates, 0.0)
        while True:
            statuses = {}
            for dest, gate in gates.items():
                statuses[dest], seconds = gate.complete(is_active)
                after_writes[dest] += seconds
            if not is_active() or not any(gates[dest].holds(status) for dest, status in statuses.items()):
                break
        held = {dest: self._held[gate.queue.path] + after_writes[dest] for dest, gate in gates.items()}
        for dest, seconds in after_writes.items():
            if seconds > 0 and self._query_id is not None and enqueued[dest].count:
                gates[dest].queue.holds.record(self._query_id, batch_id, round(seconds, 3))
        for dest, status in statuses.items():
            self.last[dest] = BatchReport(batch_id, status.queue, enqueued[dest].count, enqueued[dest].size,
                                          status.depth, status.stopped, status.flow_stopped_count, held[dest])


@contextlib.contextmanager
def _cached(batch: DataFrame) -> Iterator[DataFrame]:
    """The batch, cached while the sink works on it: measured then written, it would read the
    source twice (and Spark would report twice its ``numInputRows``).

    Cached uncompressed (set in the batch's session, the query's own, until the batch is
    written): it is read once more, so compressing it costs more than it saves (the benchmark,
    ``bench/overhead.py``, measures the sink's cost per batch)."""
    conf = batch.sparkSession.conf
    compressed = conf.get(_COMPRESSED)
    conf.set(_COMPRESSED, "false")
    cached = batch.persist()
    try:
        yield cached
    finally:
        _unpersist(cached)
        conf.set(_COMPRESSED, compressed)


def _measure(rows: DataFrame, totals: tuple[Column, Column]) -> tuple[int, int]:
    """Count and size the rows in one Spark stage, by observing a ``noop`` write: an aggregate
    needs a shuffle, two jobs under AQE."""
    from pyspark.sql import Observation

    observation = Observation()
    rows.observe(observation, *totals).write.format("noop").mode("overwrite").save()
    metrics = observation.get
    return int(metrics["count"]), int(metrics["size"])


def _unpersist(rows: DataFrame) -> None:
    """Free a cached batch. Fails when the query is being stopped (its thread is interrupted);
    Spark frees the cached blocks with the session then."""
    with contextlib.suppress(Exception):
        rows.unpersist()


def _commit_conflicts(spark: SparkSession) -> tuple[type[Exception], ...]:
    """Delta's metadata and protocol conflicts, which an append retries, as this session's client
    raises them: Delta's exceptions module for the client (py4j or Connect) turns the server's
    errors into subclasses of these."""
    if is_connect(spark):
        import delta.connect.exceptions
    else:
        import delta.exceptions  # noqa: F401
    from delta.exceptions.base import MetadataChangedException, ProtocolChangedException

    return MetadataChangedException, ProtocolChangedException


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
