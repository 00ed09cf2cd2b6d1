"""A subscription's consumer through the engine (``spark.flow.io`` engine): Delta's own streaming
source on the queue's change feed, acknowledged from the driver's side.

The ``flowqueue`` source reads in Python workers, which have no SparkSession: on governed compute
they cannot reach the queue at all. So :func:`~spark_flow.spark.source.read_queue` reads such a
queue with Delta's change feed source, after the subscription's acknowledged position, with the
columns the ``flowqueue`` source gives (the queue's, ``_position`` and ``_enqueue_time``): the
user's code does not change. What a batch took is acknowledged when its
progress is reported (:class:`EngineAcks`, a query listener in the process that started the
query, the client under Spark Connect): Delta's offset names the last commit read
(``reservoirVersion``) and how far into it (``index``), and every commit read whole is
acknowledged. Each start also reads the queue's consumer starts
(:mod:`spark_flow.records.consumer_starts`), so a restarted query runs a batch and
acknowledges what its checkpoint committed before a process died. A subscription acknowledged
part way into a commit (by a ``flowqueue`` consumer) is read again from that commit's start.
Each batch reads the subscription's position again (a stream-static join on its row), so what a
ring discarded, expiry or a stalled consumer's eviction moved it past while the query runs is
not delivered (a commit partly discarded is, whole).
Read limits are Delta's (``maxFilesPerTrigger``, ``maxBytesPerTrigger``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import QueryIdleEvent, QueryProgressEvent, QueryStartedEvent, QueryTerminatedEvent

from spark_flow.exceptions import ConfigurationError, QueueNotFoundError
from spark_flow.flow.expiry import expire
from spark_flow.rules.names import is_path, normalize_path
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.spark.listener import ClosingListener
from spark_flow.spark.session import close_before_stop, is_connect
from spark_flow.store.engine import load
from spark_flow.store.io import attach

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_flow.flow.queue import Queue
    from spark_flow.spark.source import SourceOptions

log = logging.getLogger("spark_flow.spark.engine_source")

#: The read limits of Delta's source, passed on as they are.
DELTA_LIMITS = ("maxFilesPerTrigger", "maxBytesPerTrigger")
#: Delta's offset index once every file of its version was read (DeltaSourceOffset.END_INDEX).
_END_INDEX = 2**62
#: How long (ms) a closing listener waits for the progress events already posted.
_DELIVERY_MS = 60_000


def read_engine_queue(spark: SparkSession, queue: Queue, settings: SourceOptions,
                      delta_options: Mapping[str, str]) -> DataFrame:
    """``settings.subscription``'s messages of ``queue`` as a streaming DataFrame read by
    Delta's change feed source; its batches are acknowledged as their progress is reported."""
    from pyspark.sql import functions as F

    refused = [(key, given) for key, given in (("maxRecordsPerTrigger", settings.limits.max_records),
                                               ("minRecordsPerTrigger", settings.limits.min_records),
                                               ("downstream", ",".join(settings.downstream) or None))
               if given is not None]
    if refused:
        raise ConfigurationError(*refused[0], f"an option of the flowqueue source under {IO_OPTION}=engine: "
                                 f"{', '.join(DELTA_LIMITS)} (Delta's source reads there: it counts files and "
                                 "bytes, and a gated stage needs the flowqueue source)")
    name = settings.subscription
    sub = (queue.create_subscription(name, settings.starting_position) if settings.starting_position is not None
           else queue.subscriptions.get(name))
    done = sub.acknowledged.version
    if done < queue.refresh() or not queue.consumer_starts.exists():
        queue.consumer_starts.record(name)  # this start's batch, read below: its progress acknowledges
    # From the acknowledged version itself, which is in the log (the one after may not be yet:
    # Delta refuses a starting version past the latest, even for a query with a checkpoint).
    reader = spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", max(0, done))
    for key, value in delta_options.items():
        reader = reader.option(key, value)
    expire(queue, queue.settings())  # what is too old is not delivered, as the flowqueue source does
    # The subscription's row, read again at every batch (the static side of a stream-static
    # join): what a ring discarded, expiry or a stalled consumer's eviction moved it past since
    # the query started is not delivered.
    acknowledged = (load(spark.read.format("delta"), queue.subscriptions.location)
                    .where(F.col("name") == name).select(F.col("position").alias("_acknowledged")))
    frame = (load(reader, queue.path).where(F.col("_change_type") == "insert")
             .join(F.broadcast(acknowledged), F.col("_commit_version") > F.col("_acknowledged")))
    columns = [F.col(f"`{column}`") for column in queue.schema().names]
    acks(spark).follow(queue, name, _described_as(spark, queue.path))
    messages = frame.select(*columns, F.col("_commit_version").alias("_position"),
                            F.col("_commit_timestamp").alias("_enqueue_time"))
    # The consumers' starts, none delivered: new data at every start, so a restarted query runs
    # a batch even when the queue has nothing new, and its progress acknowledges what the
    # checkpoint says was consumed (spark_flow.records.consumer_starts says why).
    starts = load(spark.readStream.format("delta"), queue.consumer_starts.location).where(F.lit(False))
    return messages.unionByName(starts.select(*[F.lit(None).cast(field.dataType).alias(field.name)
                                                for field in messages.schema.fields]))


def read_through(offset: str | None) -> int | None:
    """The last queue version a Delta source offset has read whole; None for another source's."""
    try:
        found = json.loads(offset) if offset else None
    except ValueError:
        return None
    if not isinstance(found, dict) or "reservoirVersion" not in found:
        return None
    version, index = int(found["reservoirVersion"]), int(found.get("index", -1))
    return version if index >= _END_INDEX else version - 1


class EngineAcks(ClosingListener):
    """Acknowledges, at each progress event, what the engine consumers of this process read:
    the subscription each queue is read for (one per queue and process)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._followed: dict[str, tuple[Queue, str]] = {}
        self._lock = threading.Lock()
        self._acking = threading.Lock()  # held while an acknowledgement is written
        self._closed = False

    def close(self) -> None:
        """Stop acknowledging, then stop listening: once the progress of the queries that have
        ended is in (a scheduled job ends right after its run, before a classic session's
        listener bus has handed Python that run's progress: its acknowledgement was lost, and
        the next run, with nothing new to read, acknowledged nothing) and an acknowledgement
        being written has finished (the session's stop would cut it)."""
        _progress_delivered(self._spark)
        with self._acking:
            self._closed = True
        super().close()

    def follow(self, queue: Queue, subscription: str, described_as: str) -> None:
        """Acknowledge ``subscription`` of ``queue`` as the queries reading it progress (their
        Delta source named by the table's storage location, ``described_as``)."""
        with self._lock:
            known = self._followed.get(described_as)
            if known is not None and known[1] != subscription:
                raise ConfigurationError("subscription", subscription, f"{known[1]!r}: under {IO_OPTION}=engine a "
                                         f"process reads queue {queue.name!r} for one subscription (Delta's source "
                                         "names the table, not the subscription)")
            self._followed[described_as] = (queue, subscription)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        """Nothing is read before the first batch."""

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """Nothing new was read."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """Its last batch was acknowledged at its progress."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        with self._acking:
            if not self._closed:
                self._acknowledge(event)

    def _acknowledge(self, event: QueryProgressEvent) -> None:
        for source in event.progress.sources:
            done = read_through(source.endOffset)
            path = _delta_source_path(source.description)
            with self._lock:
                followed = self._followed.get(path) if path is not None else None
            if done is None or followed is None:
                continue
            queue, subscription = followed
            try:
                queue.acknowledge(subscription, done)
                expire(queue, queue.settings())  # before the next batch reads the subscription's position
            except QueueNotFoundError as error:  # the query fails with it at its next batch
                log.info("%s", error)


def _progress_delivered(spark: SparkSession) -> None:
    """Wait (a minute at most) until a classic session's listener bus has handed its listeners
    every event posted so far. Under Spark Connect the server's bus sends each event as it comes,
    and the client's listener thread handles what was sent before it ends."""
    if is_connect(spark) or getattr(spark, "is_stopped", False):
        return
    with contextlib.suppress(Exception):  # a JVM gone (the session stopped first) has nothing to hand over
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(_DELIVERY_MS)


def _described_as(spark: SparkSession, location: str) -> str:
    """The storage location Delta's source names the table at ``location`` by in its
    description: a path, or a catalog table's location."""
    if is_path(location):
        return normalize_path(location)
    return normalize_path(str(spark.sql(f"DESCRIBE DETAIL {location}").first()["location"]))  # type: ignore[index]


def _delta_source_path(description: str | None) -> str | None:
    """The table a Delta source reads, from its description (``DeltaSource[file:/x/q]``)."""
    if not description or not description.startswith("DeltaSource[") or not description.endswith("]"):
        return None
    return normalize_path(description[len("DeltaSource["):-1])


_ACKS: dict[int, EngineAcks] = {}
_ACKS_LOCK = threading.Lock()


def acks(spark: SparkSession) -> EngineAcks:
    """The session's :class:`EngineAcks`, added to its queries the first time and removed when
    the script or job ends (a classic JVM would call a listener whose Python is gone: an ERROR
    entry at every exit)."""
    attach(spark)  # the listener's thread has no active session of its own
    with _ACKS_LOCK:
        found = _ACKS.get(id(spark))
        if found is None:
            found = _ACKS[id(spark)] = EngineAcks(spark)
            spark.streams.addListener(found)
            close_before_stop(found.close)
            atexit.register(found.close)
    return found


def delta_limits(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The options of ``read_queue`` without Delta's read limits, and those limits."""
    lowered = {key.lower(): key for key in DELTA_LIMITS}
    rest = {key: value for key, value in options.items() if key.lower() not in lowered}
    limits = {lowered[key.lower()]: str(value) for key, value in options.items() if key.lower() in lowered}
    return rest, limits
