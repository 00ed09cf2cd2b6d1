"""The ``flowqueue`` streaming source: a subscription's messages, read in enqueue order.

Offsets are queue positions: ``{"version": v, "index": i, "queue": path, "subscription": name}``
means every message through queue (Delta commit) version ``v`` and the first ``i`` messages of
version ``v + 1`` (:class:`~spark_flow.rules.depth.Position`), so a micro-batch can end inside a
commit; an offset without ``index`` (a checkpoint written before offsets had one) means the
whole of version ``v``. The offset names queue and subscription, as Kafka's name their topics, so
query progress says what a consumer reads. Acknowledging moves the
subscription's position in ``commit(end)`` and also in ``latestOffset(start, ...)``: Spark
commits a batch to its source only when the next batch starts, and when ``latestOffset`` is
called with ``start``, every batch up to ``start`` is complete (its commit log entry is
written before the next batch plans). Without that,
the last batch would stay unacknowledged and a held producer would wait forever.

One live query reads a subscription: it claims the subscription under a reader id carried in
its offsets (so a restart from its checkpoint is the same reader), renews the claim while it
runs and acknowledges only while it holds it. A second query is refused with
:class:`SubscriptionInUseError` while the first is alive; a reader whose process has ended (a
stopped or crashed query on the same host) or that was not seen for ``readerTimeout`` is taken
over. Competing consumers on one subscription would need a record of which
messages each query took; separate subscriptions already give each query every message.

Every method runs in Python worker processes without a SparkSession; the log and data files are
read with ``deltalake``.
"""

from __future__ import annotations

import itertools
import math
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from spark_flow.exceptions import ConfigurationError, ProducerSettingError
from spark_flow.flow.conf_record import record_queue_conf
from spark_flow.flow.expiry import expire
from spark_flow.flow.gate import Gate
from spark_flow.flow.queue import Queue, StartingPosition, open_queue
from spark_flow.records.subscriptions import DEFAULT_SUBSCRIPTION, READER_TIMEOUT, Subscription
from spark_flow.rules.depth import Position
from spark_flow.rules.keys import split_options
from spark_flow.rules.storage_options import storage_options
from spark_flow.rules.units import parse_count, parse_duration, parse_size
from spark_flow.spark.offsets import Offset, offset_position
from spark_flow.spark.read_limits import DEFAULT_MAX_TRIGGER_DELAY, ReadLimits

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SOURCE_OPTIONS = ("queue", "subscription", "maxRecordsPerTrigger", "maxBytesPerTrigger", "minRecordsPerTrigger",
                  "maxTriggerDelay", "startingPosition", "maxPartitions", "downstream", "readerTimeout")
STARTING_POSITIONS = ("earliest", "latest")


@dataclass(frozen=True)
class SourceOptions:
    """The flowqueue source's options, parsed once."""

    queue: str
    subscription: str = DEFAULT_SUBSCRIPTION
    limits: ReadLimits = field(default_factory=ReadLimits)
    starting_position: StartingPosition | None = None
    max_partitions: int = 4
    downstream: tuple[str, ...] = ()
    reader_timeout: float = READER_TIMEOUT
    flow_conf: Mapping[str, Any] = field(default_factory=dict)
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        own, producer, conf = split_options(options, SOURCE_OPTIONS)
        if producer:
            key = next(iter(producer))
            raise ProducerSettingError(key, producer[key], key,
                                       "an option of the flowqueue source: " + ", ".join(SOURCE_OPTIONS))
        if not own.get("queue"):
            raise ConfigurationError("queue", own.get("queue"), "the queue table's path")
        position = own.get("startingPosition")
        if position is not None and position.strip().lower() not in STARTING_POSITIONS:
            raise ConfigurationError("startingPosition", position, "earliest or latest")
        return cls(
            queue=own["queue"],
            subscription=own.get("subscription") or DEFAULT_SUBSCRIPTION,
            limits=_read_limits(own),
            starting_position=cast(StartingPosition, position.strip().lower()) if position else None,
            max_partitions=parse_count("maxPartitions", own.get("maxPartitions", 4), minimum=1),
            downstream=tuple(p.strip() for p in own.get("downstream", "").split(",") if p.strip()),
            reader_timeout=parse_duration("readerTimeout", own.get("readerTimeout", f"{READER_TIMEOUT:g}s"), minimum=1.0),
            flow_conf=conf,
            storage_options=storage_options(conf),
        )


def _read_limits(own: Mapping[str, str]) -> ReadLimits:
    """The read limits among the source's options; ``maxTriggerDelay`` bounds the wait for
    ``minRecordsPerTrigger`` and means nothing without it."""
    def given(key: str) -> str | None:
        value = own.get(key)
        return None if value is None or str(value).strip() == "" else value

    max_records, max_bytes = given("maxRecordsPerTrigger"), given("maxBytesPerTrigger")
    min_records, delay = given("minRecordsPerTrigger"), given("maxTriggerDelay")
    if delay is not None and min_records is None:
        raise ConfigurationError("maxTriggerDelay", delay, "a duration together with minRecordsPerTrigger "
                                 "(how long a batch may wait for that many messages)")
    limits = ReadLimits(
        max_records=None if max_records is None else parse_count("maxRecordsPerTrigger", max_records, minimum=1),
        max_bytes=None if max_bytes is None else parse_size("maxBytesPerTrigger", max_bytes, minimum=1),
        min_records=None if min_records is None else parse_count("minRecordsPerTrigger", min_records, minimum=1),
        max_trigger_delay=(DEFAULT_MAX_TRIGGER_DELAY if delay is None
                           else parse_duration("maxTriggerDelay", delay, minimum=0.001)),
    )
    if limits.min_records is not None and limits.max_records is not None and limits.min_records > limits.max_records:
        raise ConfigurationError("minRecordsPerTrigger", min_records, f"a whole number <= maxRecordsPerTrigger="
                                 f"{limits.max_records} (a batch would wait for more messages than it may take), "
                                 "as Kafka's minOffsetsPerTrigger")
    return limits


@dataclass(frozen=True)
class MessageRange(InputPartition):
    """The messages after position ``after`` up to position ``upto``."""

    path: str
    after: Position
    upto: Position
    storage_options: Mapping[str, str]


class FlowQueueDataSource(DataSource):
    """``spark.readStream.format("flowqueue").option("queue", path)``: a queue subscription.

    Options
    -------
    queue : the queue table's path (``spark_flow.read_queue`` resolves catalog names).
    subscription : default ``default``.
    maxRecordsPerTrigger : admit this many messages per micro-batch, fewer only when fewer wait
        (a batch may end inside a commit), as Kafka's ``maxOffsetsPerTrigger``.
    maxBytesPerTrigger : admit at most this many bytes of messages per micro-batch (``10m``,
        ``1g``), whole messages, at least one (each message counts its share of its commit's
        size), as Delta's and the file source's option.
    minRecordsPerTrigger : hold a micro-batch back until this many messages wait, for at most
        ``maxTriggerDelay`` (default 15m) since the last batch, as Kafka's
        ``minOffsetsPerTrigger``. Not waited for under ``Trigger.AvailableNow``, whose end is
        fixed: no more messages would come.
    startingPosition : ``earliest`` or ``latest``; creates the subscription there if it does
        not exist (an existing subscription goes on from its acknowledged position).
    maxPartitions : at most this many read tasks per micro-batch (default 4).
    downstream : comma-separated paths of queues this stage writes to. While any of them is
        flow-stopped, no new messages are admitted: backpressure travels up a chain of queues
        without holding a thread.
    readerTimeout : a query reading the subscription that has not been seen for this long
        (default 30s) is taken to be gone, and another query may read it.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = SourceOptions.parse(options)
        self.schema_inferred = False  # whether Spark asked for the schema: it does unless the user gave one

    @classmethod
    def name(cls) -> str:
        return "flowqueue"

    def schema(self) -> StructType:
        """The queue's columns, then ``_position`` and ``_enqueue_time``. Spark asks for it only
        when the user gave no schema (and pickles the source after): :meth:`streamReader` knows
        from it whether the schema it is handed is the user's."""
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.sql.types import LongType, StructField, TimestampType

        self.schema_inferred = True
        schema = from_arrow_schema(open_queue(self.settings.queue, self.settings.storage_options).schema())
        return schema.add(StructField("_position", LongType(), False)).add(
            StructField("_enqueue_time", TimestampType(), False)
        )

    def streamReader(self, schema: StructType) -> FlowQueueStreamReader:
        """The reader, when the query starts. A user-specified schema is refused here, before
        anything is read, as Delta's and Kafka's sources refuse one: a queue's messages have
        its columns. (Spark 4.2 runs no Python at ``load()`` when a schema is given: this is
        the first moment the source learns of it.)"""
        if not self.schema_inferred:
            raise ConfigurationError("schema", schema.simpleString(), f"no user-specified schema: a flowqueue "
                                     f"source's schema is its queue's columns, then _position and _enqueue_time "
                                     f"({self.schema().simpleString()}), as Delta's and Kafka's sources refuse one")
        return FlowQueueStreamReader(self.settings)


class FlowQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads one subscription of a queue; acknowledges what Spark has completed."""

    def __init__(self, settings: SourceOptions) -> None:
        self.settings = settings
        self._target: int | None = None
        self._recorded = False  # the conf's settings of the downstream queues
        self._reader = uuid.uuid4().hex  # a restart adopts the one in its checkpoint's offsets
        self._claimed = -math.inf  # when the claim was last renewed (time.monotonic)
        self._acknowledged: Position | None = None  # the ack position this reader last read or moved
        self._last_batch = time.monotonic()  # maxTriggerDelay counts from the last batch, or the start

    @property
    def _queue(self) -> Queue:
        return open_queue(self.settings.queue, self.settings.storage_options)

    def _subscription(self) -> Subscription:
        queue, name = self._queue, self.settings.subscription
        if self.settings.starting_position is not None:
            return queue.create_subscription(name, self.settings.starting_position)
        return queue.subscriptions.get(name)

    def _offset(self, position: Position) -> Offset:
        return {"version": position.version, "index": position.index, "queue": self.settings.queue,
                "subscription": self.settings.subscription, "reader": self._reader}

    def _claim(self) -> None:
        """Hold the subscription for this query, renewed a few times per ``readerTimeout``."""
        if time.monotonic() - self._claimed > self.settings.reader_timeout / 3:
            self._queue.subscriptions.claim(self.settings.subscription, self._reader, self.settings.reader_timeout)
            self._claimed = time.monotonic()

    def initialOffset(self) -> Offset:
        """Where a query without a checkpoint starts: the subscription's ack position.

        Returns
        -------
        dict
            The offset of that position (created first with ``startingPosition``).

        Notes
        -----
        No claim here: Spark asks for it on a restart too, then starts from the checkpoint's
        offsets, whose reader id :meth:`latestOffset` adopts and claims.
        """
        return self._offset(self._subscription().acknowledged)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The source's read limits as Spark's one ``ReadLimit`` (``ReadMaxRows``,
        ``ReadMaxBytes``, ``ReadMinRows`` or ``ReadAllAvailable``); :meth:`latestOffset`
        applies them all."""
        return self.settings.limits.spark_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read up to the queue version that is the latest now, no further."""
        self._target = self._queue.refresh()

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """The end of the next micro-batch, and the acknowledgement of every batch before it.

        Parameters
        ----------
        start : dict
            Where the next batch starts: the end of the last batch Spark planned.
        limit : ReadLimit
            ``ReadAllAvailable`` admits everything; any other, the source's read limits
            (:class:`~spark_flow.spark.read_limits.ReadLimits`), message by message.

        Returns
        -------
        dict
            ``start`` itself while there is nothing new, a downstream queue is stopped (the
            consumer is held back by backpressure) or a minimum is waited for, else the offset
            after the last admitted message.

        Notes
        -----
        It acknowledges up to ``start``: Spark calls this only once the batch ending at
        ``start`` is complete, but tells the source (``commit``) only when the next batch has
        run. Acknowledging in ``commit`` alone would leave the last batch's messages in the
        depth while no new message arrives, and a producer held by them would wait forever.
        """
        with self._queue.owner.failing_as_gone():  # a deletion racing a look fails naming the queue
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        queue, name = self._queue, self.settings.subscription
        self._reader = start.get("reader", self._reader)
        self._claim()
        begin = offset_position(start)
        if begin > queue.subscriptions.get(name).acknowledged:  # every batch up to start is complete
            queue.acknowledge(name, begin, reader=self._reader)
        latest = queue.refresh()
        expire(queue, queue.settings())  # what is too old is not delivered
        position = queue.subscriptions.get(name).acknowledged  # ahead of start when a ring discarded or expired
        self._acknowledged = max(begin, position)
        if self._target is not None:
            latest = min(latest, self._target)
        after = max(begin, position)
        downstream = self._downstream()
        if latest <= after.version:
            for target in downstream:  # idle, yet a deleted downstream queue ends the stage at this trigger
                target.refresh()
            return start
        if any(Gate(target).step().held for target in downstream):
            return start
        waited = math.inf if self._target is not None else time.monotonic() - self._last_batch
        end = self.settings.limits.end(queue.ledger.commits(after.version, latest), after.index, waited, limit)
        if end is None:
            return start
        self._last_batch = time.monotonic()
        return self._offset(end)

    def _downstream(self) -> list[Queue]:
        """The queues this stage writes. While one is flow-stopped, it admits nothing. It writes
        them, so at its first look the queue settings its Spark conf gives are recorded with them,
        as a producer's are, and they are recorded as its subscription's downstream (held back by
        them, it is not stalled). Opened per call: the reader is pickled to read tasks, and
        deltalake handles do not pickle."""
        downstream = [open_queue(path, self.settings.storage_options) for path in self.settings.downstream]
        if not self._recorded:
            for queue in downstream:
                record_queue_conf(queue, self.settings.flow_conf)
            self._queue.subscriptions.add_downstream(self.settings.subscription, [q.path for q in downstream])
            self._recorded = True
        return downstream

    def reportLatestOffset(self) -> Offset:
        """The queue's newest version, for query progress (``latestOffset`` in the source's metrics)."""
        return self._offset(Position(self._queue.refresh()))

    def partitions(self, start: Offset, end: Offset) -> list[MessageRange]:
        """Split the messages from ``start`` to ``end`` into up to ``maxPartitions`` read tasks,
        at commit boundaries.

        A ring queue may have moved the subscription past ``start`` (it discarded the oldest
        messages): those are not read.
        """
        queue = self._queue
        queue.owner.require()  # a queue deleted since latestOffset: fail here, not in the read tasks
        position = queue.subscriptions.get(self.settings.subscription).acknowledged
        after, upto = max(offset_position(start), position), offset_position(end)
        if upto <= after:
            return []
        span = upto.version - after.version
        parts = max(1, min(self.settings.max_partitions, span))
        inner = [Position(after.version + span * i // parts) for i in range(1, parts)]
        bounds = [after, *inner, upto]
        return [MessageRange(self.settings.queue, lo, hi, self.settings.storage_options)
                for lo, hi in itertools.pairwise(bounds) if hi > lo]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The messages of one task, from the queue's change feed, in enqueue order."""
        assert isinstance(partition, MessageRange)  # made by partitions() above
        yield from open_queue(partition.path, partition.storage_options).read(partition.after, partition.upto).to_batches()

    def commit(self, end: Offset) -> None:
        """Acknowledge up to ``end``: Spark has completed the batch ending there.

        Spark calls it after :meth:`latestOffset` of the next batch, which acknowledged ``end``
        already in this process: then nothing is read or written (a look at the subscriptions
        table per batch saved)."""
        position = offset_position(end)
        if self._acknowledged is not None and position <= self._acknowledged:
            return
        self._queue.acknowledge(self.settings.subscription, position, reader=end.get("reader", self._reader))
        self._acknowledged = position



def read_queue(spark: SparkSession, queue: str, subscription: str = DEFAULT_SUBSCRIPTION,
               **options: Any) -> DataFrame:
    """A streaming DataFrame of ``queue``'s messages for ``subscription``.

    Registers the ``flowqueue`` source, resolves a catalog name to its location and passes the
    session's ``spark.flow.*`` conf and storage options to the source (whose workers have no
    SparkSession). A queue this process reaches through the engine (``spark.flow.io``) is read
    by Delta's own source instead (:mod:`spark_flow.spark.engine_source`), with the same columns.
    """
    from spark_flow.rules.storage_options import as_conf
    from spark_flow.spark.declare import queue_location
    from spark_flow.spark.engine_source import delta_limits, read_engine_queue
    from spark_flow.spark.session import session_flow_conf, session_storage_options
    from spark_flow.store.io import uses_engine

    location, storage = queue_location(spark, queue), session_storage_options(spark)
    if "downstream" in options:
        names = str(options["downstream"]).split(",")
        options["downstream"] = ",".join(queue_location(spark, n.strip()) for n in names if n.strip())
    passed = {**session_flow_conf(spark), **as_conf(storage), "subscription": subscription}
    if uses_engine(location, storage):
        own, limits = delta_limits(options)
        settings = SourceOptions.parse({**passed, **{key: str(value) for key, value in own.items()}, "queue": location})
        return read_engine_queue(spark, open_queue(location, storage), settings, limits)
    spark.dataSource.register(FlowQueueDataSource)
    reader = spark.readStream.format("flowqueue").option("queue", location)
    for key, value in {**passed, **options}.items():
        reader = reader.option(key, str(value))
    return reader.load()
