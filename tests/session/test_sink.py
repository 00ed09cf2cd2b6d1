"""The enqueue sink called directly as a foreachBatch function: exactly once, chunks, schema
checks, routing, sizes and the limit policies, on real Delta queues.

A direct call never sees a query stop, so a call held by a flow-stopped queue would block for
ever: every test here either ends with the queue flow-OFF, uses a policy that raises, or has a
consumer thread that acknowledges.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from support.stores import Io
from support.streams import start_producer, wait_until

from spark_flow.exceptions import (
    ConfigurationError,
    FlowControlError,
    QueueFullError,
    QueueFullTimeoutError,
    SchemaMismatchError,
)
from spark_flow.flow.gate import Gate
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.rules.depth import METADATA_KEY, Depth, Position
from spark_flow.rules.settings import ProducerSettings
from spark_flow.spark.batch import TXN_SPAN
from spark_flow.spark.declare import declare
from spark_flow.spark.listener import FlowProgressListener
from spark_flow.spark.sink import QueueSink

# A held direct call never returns: fail instead of hanging.
pytestmark = pytest.mark.timeout(120)

SCHEMA = "id BIGINT, body STRING"


def messages(spark: SparkSession, ids: Iterable[int], schema: str = SCHEMA) -> DataFrame:
    """Messages ``(id, 'm<id>')``."""
    return spark.createDataFrame([(i, f"m{i}") for i in ids], schema)


def table(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def latest_version(path: str) -> int:
    """The table's latest commit version (read with deltalake: no Spark job)."""
    return DeltaTable(path).version()


def row_count(path: str) -> int:
    return DeltaTable(path).to_pyarrow_table().num_rows


def sink_commits(path: str) -> list[tuple[int, int, int]]:
    """``(version, count, size)`` of every commit the sink wrote, oldest first, from the
    ``userMetadata`` of the table's history."""
    commits = []
    for info in DeltaTable(path).history():
        if info.get("userMetadata") and METADATA_KEY in info["userMetadata"]:
            meta = json.loads(info["userMetadata"])[METADATA_KEY]
            commits.append((info["version"], meta["count"], meta["size"]))
    return sorted(commits)


def assert_same_rows(actual: DataFrame, expected: DataFrame) -> None:
    """Every expected row once, and nothing else."""
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


class Consumer:
    """A consumer thread that acknowledges everything whenever the default subscription is
    flow-stopped, so a held sink call goes on."""

    def __init__(self, path: str) -> None:
        self.queue = Queue(path)  # its own handle, as another process would have
        self._done = threading.Event()
        self.acks = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            stopped = self.queue.subscriptions.get("default").flow_stopped
            if stopped and self.queue.acknowledge("default", self.queue.refresh()):
                self.acks += 1
            time.sleep(0.05)

    def __enter__(self) -> Consumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)


# --- exactly once ---------------------------------------------------------------------------


def test_replayed_batch_id_writes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """The same batch id again (a restarted query, a new sink object) adds no rows and no
    commit; a new batch id with the same rows is a new batch."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    df = messages(spark, range(20))
    QueueSink(path, app_id="producer-1")(df, 7)
    version = latest_version(path)

    replay = QueueSink(path, app_id="producer-1")
    replay(df, 7)
    assert latest_version(path) == version
    assert row_count(path) == 20
    assert replay.last[path].count == 20, "the report still shows the batch"
    assert open_queue(path).transaction_version("producer-1") == 7 * TXN_SPAN + 20

    replay(df, 8)
    assert latest_version(path) == version + 1
    assert row_count(path) == 40


def test_a_streamed_batch_is_read_once_and_counted_once(spark: SparkSession, tmp_path: Path) -> None:
    """The sink counts and sizes a batch before writing it; the batch is cached for that, so
    its source is read once and the query's ``numInputRows`` is what it enqueued, not twice."""
    source, queue = str(tmp_path / "source"), str(tmp_path / "q")
    for first in (0, 10, 20):
        messages(spark, range(first, first + 10)).coalesce(1).write.format("delta").mode("append").save(source)
    declare(spark, queue, SCHEMA)
    query = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source).writeStream
             .foreachBatch(QueueSink(queue)).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert [p.numInputRows for p in query.recentProgress if p.numInputRows] == [10, 10, 10]
    assert [count for _, count, _ in sink_commits(queue)] == [10, 10, 10]
    assert_same_rows(table(spark, queue), messages(spark, range(30)))


def test_a_hold_producers_batch_under_capacity_looks_at_the_queue_once(spark: SparkSession, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A hold producer writes a fresh batch's capacity window whatever the depth, so the batch
    needs one look at the queue: after its write, to know whether to hold it."""
    looks = []
    step = Gate.step
    monkeypatch.setattr(Gate, "step", lambda gate: looks.append(gate.queue.name) or step(gate))
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 100})
    sink = QueueSink(path, app_id="producer-1", options={"capacity": 50})
    for batch_id in range(3):
        sink(messages(spark, range(batch_id * 10, batch_id * 10 + 10)), batch_id)
    assert len(looks) == 3, "one look per batch"
    assert [count for _, count, _ in sink_commits(path)] == [10, 10, 10]


def test_the_batch_cache_and_session_conf_are_left_as_found(spark: SparkSession, tmp_path: Path) -> None:
    """The sink caches the batch uncompressed while it works on it: afterwards, and after a
    refused batch too, the batch is not cached and the session's compression setting is back."""
    from pyspark.storagelevel import StorageLevel

    path, key = str(tmp_path / "q"), "spark.sql.inMemoryColumnarStorage.compressed"
    declare(spark, path, SCHEMA)
    good, bad = messages(spark, range(5)), spark.createDataFrame([(1,)], "id BIGINT")
    spark.conf.set(key, "true")
    QueueSink(path, app_id="p")(good, 0)
    with pytest.raises(SchemaMismatchError):
        QueueSink(path, app_id="p")(bad, 1)
    assert spark.conf.get(key) == "true"
    assert good.storageLevel == StorageLevel.NONE and bad.storageLevel == StorageLevel.NONE
    assert row_count(path) == 5


def test_a_running_producer_survives_metadata_commits_on_its_queue(spark: SparkSession, tmp_path: Path) -> None:
    """ALTER TBLPROPERTIES and re-declares while a producer streams into the queue: Delta fails an
    append that overlaps a metadata commit (MetadataChangedException); the sink appends again,
    the query goes on, and every message is in the queue once."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, producer STRING", settings={"stopCount": 100_000})
    producer, _ = start_producer(spark, path, tmp_path / "p", "p", 400)
    try:
        wait_until(lambda: queue.refresh() > 3, 60)
        for i in range(12):
            if i % 3:
                spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('flow.stallTimeout' = '{i}s')")
            else:
                declare(spark, path, settings={"stopCount": 100_000 + i})
        written = queue.refresh()
        wait_until(lambda: queue.refresh() > written + 2, 60)
        assert producer.isActive and producer.exception() is None
    finally:
        producer.stop()
    rows = spark.read.format("delta").load(path)
    assert rows.count() == rows.select("id").distinct().count() > 0


def test_batch_bigger_than_capacity_is_written_in_chunks(spark: SparkSession, tmp_path: Path) -> None:
    """25 rows with capacity 10 on a queue with flow control: three commits of at most 10 rows
    (docs/design.md 2.2), every row exactly once, the txnVersion at batchId * 2**32 + 25."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 1000, "resumeCount": 500})
    df = messages(spark, range(25))
    sink = QueueSink(path, options={"capacity": 10}, app_id="p")
    sink(df, 3)

    counts = [count for _v, count, _s in sink_commits(path)]
    assert counts == [10, 10, 5]
    assert_same_rows(table(spark, path), df)
    assert open_queue(path).transaction_version("p") == 3 * TXN_SPAN + 25
    assert sink.last[path].count == 25 and sink.last[path].depth.count == 25
    assert not sink.last[path].flow_stopped


def test_chunks_are_held_until_a_consumer_makes_room(spark: SparkSession, tmp_path: Path) -> None:
    """Stop 15 / resume 10, capacity 10, 30 rows: the gate is looked at between chunks, so the
    call is held after the second chunk (depth 20 > 15) until the consumer acknowledges; the
    depth never exceeds stop + capacity."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 15, "resumeCount": 10})
    df = messages(spark, range(30))
    sink = QueueSink(path, options={"capacity": 10, "pollInterval": "100ms"}, app_id="p")
    with Consumer(path) as consumer:
        sink(df, 0)

    assert [count for _v, count, _s in sink_commits(path)] == [10, 10, 10]
    assert_same_rows(table(spark, path), df)
    report = sink.last[path]
    assert report.depth.count == 10
    assert not report.flow_stopped and report.flow_stopped_count == 1
    assert consumer.acks == 1
    assert report.held_seconds > 0, "BatchReport.held_seconds leaves out the hold between chunks"
    history = open_queue(path).history.read()
    assert [(r["flow_stopped"], r["depth_count"]) for r in history] == [(True, 20), (False, 0)]
    assert max(r["depth_count"] for r in history) <= 15 + 10


def test_crash_between_chunks_then_replay_writes_only_the_rest(spark: SparkSession, tmp_path: Path) -> None:
    """onFull reject, stop 9, capacity 10, 18 rows: the call fails after its first chunk (the
    queue turned ON). Replayed while still ON it writes nothing; replayed after the consumer
    acknowledged (rows in another order and partitioning) it writes exactly the 8 others."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 9, "resumeCount": 5})
    df = messages(spark, range(18))
    with pytest.raises(QueueFullError, match="refused the batch: flow-stopped"):
        QueueSink(path, options={"capacity": 10, "onFull": "reject"}, app_id="p")(df, 5)
    assert [count for _v, count, _s in sink_commits(path)] == [10]
    assert row_count(path) == 10

    with pytest.raises(QueueFullError):
        QueueSink(path, options={"capacity": 10, "onFull": "reject"}, app_id="p")(df, 5)
    assert row_count(path) == 10, "a replay into a stopped queue adds nothing"

    queue.acknowledge("default", queue.refresh())
    shuffled = df.orderBy(F.desc("id")).repartition(3)
    replay = QueueSink(path, options={"capacity": 10}, app_id="p")
    replay(shuffled, 5)
    assert [count for _v, count, _s in sink_commits(path)] == [10, 8]
    assert_same_rows(table(spark, path), df)
    assert replay.last[path].depth.count == 8 and not replay.last[path].flow_stopped

    replay(df, 5)
    assert row_count(path) == 18


# --- publish rate ---------------------------------------------------------------------------


def commit_metadata(path: str) -> list[dict]:
    """The sink's ``userMetadata`` entry of every commit it wrote, oldest first."""
    infos = sorted(DeltaTable(path).history(), key=lambda info: info["version"])
    return [json.loads(i["userMetadata"])[METADATA_KEY] for i in infos if METADATA_KEY in (i.get("userMetadata") or "")]


@pytest.mark.parametrize(("options", "rows", "body"), [({"msgPublishRate": 5}, 15, 1), ({"bytePublishRate": "256"}, 3, 504)],
                         ids=["msgPublishRate 5, 15 messages", "bytePublishRate 256, 3 messages of 512 bytes"])
def test_a_publish_rate_paces_the_writes_of_a_batch(spark: SparkSession, tmp_path: Path, options: dict, rows: int,
                                                    body: int) -> None:
    """Pulsar's publish rate: a batch is written in three writes of at most one second of quota
    each, or one message (two seconds of quota at 256 bytes a second: a write slower than a
    second on a loaded machine still leaves a wait), each started once the one before it is paid
    for. So the call lasts at least the two seconds the waits make (the waits are the
    mechanism: a lower bound, not a timing), and reports the time throttled, apart from the time
    held, in its report and commits."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    df = spark.createDataFrame([(i, "x" * body) for i in range(rows)], SCHEMA)
    sink = QueueSink(path, options=options, app_id="p")
    started = time.monotonic()
    sink(df, 0)
    elapsed = time.monotonic() - started

    assert [count for _v, count, _s in sink_commits(path)] == [rows // 3] * 3
    assert elapsed >= 2.0
    report = sink.last[path]
    assert 0 < report.throttled_seconds <= elapsed and report.held_seconds == 0
    throttled = [meta["throttled"] for meta in commit_metadata(path)]
    assert throttled[0] == 0 and throttled == sorted(throttled) and throttled[-1] == round(report.throttled_seconds, 3)
    assert_same_rows(table(spark, path), df)


def test_a_throttled_query_stops_promptly_and_its_restart_writes_the_rest_once(spark: SparkSession,
                                                                                tmp_path: Path) -> None:
    """msgPublishRate 4 and a first batch of 20 messages (five seconds of quota): stopped once two
    of its writes are in, the query ends while throttled (the batch fails with
    HoldInterruptedError; nothing waits out the quota), with messages still to write. Restarted
    from its checkpoint it writes exactly the rest, and the query listener reports that batch's
    time throttled beside its time held."""
    path, source = str(tmp_path / "q"), str(tmp_path / "in")
    declare(spark, path, SCHEMA)
    messages(spark, range(20)).coalesce(1).write.format("delta").save(source)
    listener = FlowProgressListener(queues=[path])
    spark.streams.addListener(listener)

    def start() -> StreamingQuery:
        return (spark.readStream.format("delta").load(source).writeStream
                .foreachBatch(QueueSink(path, options={"msgPublishRate": 4}))
                .option("checkpointLocation", str(tmp_path / "chk")).start())

    try:
        query = start()
        wait_until(lambda: len(sink_commits(path)) >= 2, 90)
        query.stop()
        written = row_count(path)
        assert written < 20, "the stop came while the batch was throttled, not after its last write"
        restarted = start()
        restarted.processAllAvailable()
        wait_until(lambda: str(restarted.id) in listener.progress, 30)
        restarted.stop()
    finally:
        spark.streams.removeListener(listener)
    assert_same_rows(table(spark, path), messages(spark, range(20)))
    [report] = listener.progress[str(restarted.id)]
    assert (report.role, report.batch_id, report.count) == ("producer", 0, 20 - written)
    assert report.throttled_seconds > 0 and report.held_seconds == 0


# --- schema ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "row", "detail"),
    [
        ("id BIGINT", (1,), r"missing columns \['body'\]"),
        ("id BIGINT, body STRING, extra STRING", (1, "m1", "x"), r"unknown columns \['extra'\]"),
        ("id STRING, body STRING", ("1", "m1"), r"id is string, queue has bigint"),
    ],
    ids=["missing", "extra", "wrong-type"],
)
def test_schema_mismatch_raises_naming_the_column_and_enqueues_nothing(
    spark: SparkSession, tmp_path: Path, schema: str, row: tuple, detail: str
) -> None:
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    version = latest_version(path)
    batch = spark.createDataFrame([row], schema)
    with pytest.raises(SchemaMismatchError, match=detail):
        QueueSink(path, app_id="p")(batch, 0)
    assert latest_version(path) == version
    assert row_count(path) == 0


# --- routing and sizes ----------------------------------------------------------------------


def test_route_column_sends_each_row_to_its_queue(spark: SparkSession, tmp_path: Path) -> None:
    """Rows go to the queue their route column names, without that column, in a commit per
    queue; a replay writes neither again."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    declare(spark, a, SCHEMA)
    declare(spark, b, SCHEMA)
    df = messages(spark, range(30)).withColumn("dest", F.when(F.col("id") % 3 == 0, F.lit(a)).otherwise(F.lit(b)))
    sink = QueueSink(route_column="dest", app_id="router")
    sink(df, 0)

    for path, ids in ((a, [i for i in range(30) if i % 3 == 0]), (b, [i for i in range(30) if i % 3 != 0])):
        rows = DeltaTable(path).to_pyarrow_table()
        assert rows.column_names == ["id", "body"]
        assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == [{"id": i, "body": f"m{i}"} for i in ids]
        assert [c for _v, c, _s in sink_commits(path)] == [len(ids)]
        assert sink.last[path].count == len(ids)
    versions = (latest_version(a), latest_version(b))
    sink(df, 0)
    assert (latest_version(a), latest_version(b)) == versions


def test_batch_to_several_queues_is_held_until_every_one_is_off(spark: SparkSession, tmp_path: Path) -> None:
    """Head-of-line blocking: a batch routed to A and B completes only when both are flow-OFF.
    A's consumer releases A at once; B's consumer starts only 1.5 s after B's messages are in,
    and the call returns only after B's release is recorded too."""
    from datetime import UTC, datetime

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    declare(spark, a, SCHEMA, settings={"stopCount": 2, "resumeCount": 1})
    declare(spark, b, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    df = messages(spark, range(10)).withColumn("dest", F.when(F.col("id") < 3, F.lit(a)).otherwise(F.lit(b)))
    sink = QueueSink(route_column="dest", app_id="router", options={"pollInterval": "100ms"})
    late = Consumer(b)

    def release_b_late() -> None:
        queue_b = Queue(b)
        while queue_b.depths()["default"].count < 7:
            time.sleep(0.1)
        time.sleep(1.5)
        late.__enter__()

    helper = threading.Thread(target=release_b_late, daemon=True)
    with Consumer(a):
        helper.start()
        sink(df, 0)
    returned = datetime.now(UTC)
    late.__exit__()
    offs = {}
    for path in (a, b):
        history = open_queue(path).history.read()
        assert [r["flow_stopped"] for r in history][:2] == [True, False]
        offs[path] = history[1]["time"]
        assert not sink.last[path].flow_stopped
    assert returned >= max(offs.values()), "the batch completed only once every destination was OFF"
    assert sink.last[b].held_seconds > 0, "B held the batch too"


def test_route_column_missing_raises(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(SchemaMismatchError, match="route column 'dest'"):
        QueueSink(route_column="dest", app_id="router")(messages(spark, range(3)), 0)


def test_size_column_sets_message_sizes(spark: SparkSession, tmp_path: Path) -> None:
    """With ``size_column`` each message weighs its column's value (null counts 0); without,
    its content bytes (UTF-8 strings, 8 per bigint)."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, body STRING, sz BIGINT")
    df = spark.createDataFrame([(1, "a", 100), (2, "b", 250), (3, "c", None)], "id BIGINT, body STRING, sz BIGINT")
    sink = QueueSink(path, size_column="sz", app_id="p")
    sink(df, 0)
    assert sink.last[path].size == 350
    assert sink_commits(path)[-1][1:] == (3, 350)
    assert queue.depths()["default"] == Depth(3, 350)

    plain = str(tmp_path / "plain")
    declare(spark, plain, SCHEMA)
    df = spark.createDataFrame([(1, "é"), (2, "abc"), (3, None)], SCHEMA)
    QueueSink(plain, app_id="p")(df, 0)
    assert open_queue(plain).depths()["default"] == Depth(3, (8 + 2) + (8 + 3) + 8)


# --- policies -------------------------------------------------------------------------------


def fill_until_stopped(spark: SparkSession, path: str, rows: int, on_full: str) -> None:
    """Enqueue ``rows`` messages with a sink whose ``onFull`` does not hold; the queue turns ON
    at the end of the call."""
    sink = QueueSink(path, options={"onFull": on_full}, app_id="filler")
    sink(messages(spark, range(rows)), 0)
    assert sink.last[path].flow_stopped


def test_reject_raises_queue_full_with_queue_depth_and_thresholds(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 3})
    fill_until_stopped(spark, path, 10, "reject")
    version, depth = latest_version(path), queue.depths()["default"]

    with pytest.raises(QueueFullError, match=r"queue 'q' refused the batch: flow-stopped, onFull reject \(depth 10 messages") as info:
        QueueSink(path, options={"onFull": "reject"}, app_id="p")(messages(spark, range(100, 103)), 0)
    error = info.value
    assert isinstance(error, FlowControlError)
    assert error.queue == "q"
    assert error.depth == depth
    assert (error.thresholds.stop_count, error.thresholds.resume_count) == (5, 3)
    assert latest_version(path) == version
    assert row_count(path) == 10


def test_reject_after_raises_after_the_timeout(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 3})
    fill_until_stopped(spark, path, 10, "reject")
    version = latest_version(path)

    sink = QueueSink(path, options={"onFull": "reject-after", "rejectTimeout": "300ms"}, app_id="p")
    started = time.monotonic()
    with pytest.raises(QueueFullTimeoutError, match=r"rejectTimeout 0.3s") as info:
        sink(messages(spark, range(100, 103)), 0)
    elapsed = time.monotonic() - started
    held = float(re.search(r"held (\d+\.\d+)s", str(info.value)).group(1))
    assert 0.3 <= held < 1.5
    assert 0.3 <= elapsed < 10
    assert isinstance(info.value, FlowControlError) and info.value.depth.count == 10
    assert latest_version(path) == version


def test_ring_discards_the_oldest_messages_for_the_subscription(spark: SparkSession, tmp_path: Path) -> None:
    """maxCount 20, three batches of 10: the default subscription skips the oldest commit, its
    depth is 20, 10 messages are counted as discarded and the 20 newest are still there."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"policy": "ring", "maxCount": 20})
    sink = QueueSink(path, app_id="p")
    for batch in range(3):
        sink(messages(spark, range(batch * 10, batch * 10 + 10)), batch)

    commits = [version for version, _c, _s in sink_commits(path)]
    assert len(commits) == 3
    sub = queue.subscriptions.get("default")
    assert queue.depths()["default"].count <= 20
    assert sub.position >= commits[0]
    assert sub.discarded_count == 10
    assert not sub.flow_stopped and sub.flow_stopped_count == 0
    kept = queue.read(sub.acknowledged, Position(queue.refresh()))
    assert sorted(kept.column("id").to_pylist()) == list(range(10, 30))


def test_ring_keeps_exactly_its_max_of_one_commit(spark: SparkSession, tmp_path: Path) -> None:
    """maxCount 250 and one commit of 1,000 (Qpid's RING keeps the newest 250): the subscription
    moves 750 messages into the commit, its depth is exactly 250, 750 are counted as discarded,
    and what it reads next is the commit's last 250 messages (in its fixed order: by content)."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"policy": "ring", "maxCount": 250})
    QueueSink(path, app_id="p")(messages(spark, range(1000)).repartition(3), 0)

    [(version, count, size)] = sink_commits(path)
    sub = queue.subscriptions.get("default")
    assert (count, sub.acknowledged, sub.discarded_count) == (1000, Position(version - 1, 750), 750)
    assert queue.depths()["default"] == Depth(250, size - size * 750 // 1000)
    kept = queue.read(sub.acknowledged, Position(version))
    assert kept.column("id").to_pylist() == list(range(750, 1000))


def test_ring_strict_rejects_a_batch_larger_than_the_queue(spark: SparkSession, tmp_path: Path) -> None:
    """ring-strict cannot make room for a single batch above maxCount: QueueFullError, and
    (docs/design.md 3.7) that batch is not left in the queue."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"policy": "ring-strict", "maxCount": 20})
    version = latest_version(path)
    with pytest.raises(QueueFullError, match="ring-strict"):
        QueueSink(path, app_id="p")(messages(spark, range(25)), 0)
    assert latest_version(path) == version, "the rejected batch was enqueued anyway"
    assert row_count(path) == 0


@pytest.mark.parametrize("where", ["table-property", "producer-conf"])
def test_producer_flow_control_false_never_stops(spark: SparkSession, tmp_path: Path, where: str) -> None:
    """Over its stop threshold a queue with producerFlowControl=false does not stop (onFull
    reject, so a stop would fail the call instead of holding it). Given in the producer's Spark
    conf, the setting is recorded with the queue at the first batch, so every process sees it."""
    path = str(tmp_path / "q")
    settings: dict[str, object] = {"stopCount": 5, "resumeCount": 3}
    if where == "table-property":
        settings["producerFlowControl"] = "false"
    queue = declare(spark, path, SCHEMA, settings=settings)
    sink = QueueSink(path, options={"onFull": "reject"}, app_id="p")
    if where == "producer-conf":
        spark.conf.set("spark.flow.producerFlowControl", "false")
    try:
        for batch in range(2):
            sink(messages(spark, range(batch * 10, batch * 10 + 10)), batch)
            assert not sink.last[path].flow_stopped
    finally:
        spark.conf.unset("spark.flow.producerFlowControl")
    assert queue.depths()["default"].count == 20
    assert [(s.flow_stopped, s.flow_stopped_count) for s in queue.subscriptions.list()] == [(False, 0)]
    assert Queue(path).properties()["flow.producerFlowControl"] == "false"


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("capacity", 0, "a whole number >= 1"),
        ("onFull", "drop", "one of hold, reject, reject-after"),
        ("rejectTimeout", "soon", "a duration"),
    ],
)
def test_bad_sink_option_raises_before_anything_is_written(
    spark: SparkSession, tmp_path: Path, key: str, value: object, allowed: str
) -> None:
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 100, "resumeCount": 50})
    version = latest_version(path)
    with pytest.raises(ConfigurationError, match=rf"^{key}={value!r} is not valid: allowed is {allowed}"):
        sink = QueueSink(path, options={key: value}, app_id="p")
        sink(messages(spark, range(5)), 0)
    assert latest_version(path) == version
    assert row_count(path) == 0


# --- the Qpid example, message by message -----------------------------------------------------


def test_an_empty_batch_into_a_flow_stopped_queue_completes_once_the_queue_resumes(
        spark: SparkSession, tmp_path: Path) -> None:
    """An empty batch (a ``rate`` source's first) writes nothing and is held like any other: a
    producer started while its queue is flow-stopped goes on once the queue resumes."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 2, "resumeCount": 1})
    messages(spark, range(3)).write.format("delta").mode("append").save(path)  # depth 3 > stop 2
    version = Queue(path).refresh()
    sink = QueueSink(path, app_id="p", options={"pollInterval": "100ms"})
    with Consumer(path) as consumer:  # acknowledges once the gate recorded the stop
        sink(messages(spark, []), 0)
    report = sink.last[path]
    assert consumer.acks == 1 and report.count == 0 and report.held_seconds > 0
    assert not report.flow_stopped and report.flow_stopped_count == 1
    assert Queue(path).refresh() == version, "the empty batch committed nothing"


def test_stop_9_resume_5_message_by_message(spark: SparkSession, io: Io) -> None:
    """One-message batches: flowStopped turns ON with the 10th message (count > 9), the 11th is
    refused; acknowledged one by one, flow turns OFF only when 4 remain (count < 5), and
    flowStoppedCount is 1. In both stores: through the engine each look after a write or an
    acknowledgement of this process sees it."""
    path = io.queue("q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 9, "resumeCount": 5})
    sink = QueueSink(path, options={"onFull": "reject"}, app_id="p")
    for i in range(10):
        sink(messages(spark, [i]), i)
        report = sink.last[path]
        assert report.depth.count == i + 1
        assert report.flow_stopped == (i + 1 > 9), f"after message {i + 1}"
    assert report.flow_stopped_count == 1
    with pytest.raises(QueueFullError):
        sink(messages(spark, [10]), 10)

    gate = Gate(queue, ProducerSettings(on_full="reject"))
    history = spark.sql(f"DESCRIBE HISTORY {path if io.mode == 'engine' else f'delta.`{path}`'}").collect()
    versions = sorted(row.version for row in history if row.userMetadata and METADATA_KEY in row.userMetadata)
    assert len(versions) == 10
    for acked, version in enumerate(versions[:6], start=1):
        queue.acknowledge("default", version)
        status = gate.step()
        assert status.depth.count == 10 - acked
        assert status.held == (10 - acked >= 5), f"depth {10 - acked}"
    sub = queue.subscriptions.get("default")
    assert (sub.flow_stopped, sub.flow_stopped_count) == (False, 1)


# --- every column type ----------------------------------------------------------------------

EVERY_TYPE = ("id BIGINT, tags MAP<STRING, STRING>, items ARRAY<STRUCT<a: INT, b: STRING>>, v VARIANT, "
              "bin BINARY, amount DECIMAL(38, 0), ts TIMESTAMP_NTZ, note STRING")


def every_type_batch(spark: SparkSession, rows: int) -> DataFrame:
    """``rows`` messages with every kind of column, built by SQL functions as a user would:
    ``map()`` and ``array()`` give non-null values (a stricter type than the queue's), ``note``
    is a null-only (void) column."""
    return spark.sql(f"""
        SELECT id, map('k', concat('t', id % 3)) AS tags,
               array(named_struct('a', CAST(id AS INT), 'b', 'x')) AS items,
               parse_json(concat('{{"n": ', id, '}}')) AS v, CAST(concat('b', id) AS BINARY) AS bin,
               CAST(id AS DECIMAL(38, 0)) * 1000000000000000000000 AS amount,
               CAST('2026-11-22 12:00:00.123456' AS TIMESTAMP_NTZ) AS ts, NULL AS note
        FROM range({rows})""")


def as_text(df: DataFrame) -> list[tuple]:
    """Rows as comparable text (variant and map columns have no equality)."""
    return sorted(df.selectExpr("id", "to_json(tags)", "to_json(items)", "to_json(v)", "hex(bin)",
                                "CAST(amount AS STRING)", "CAST(ts AS STRING)", "note").collect())


@pytest.mark.parametrize("capacity", [None, 10], ids=["whole", "chunked"])
def test_every_column_type_delta_takes_is_enqueued(spark: SparkSession, tmp_path: Path, capacity: int | None) -> None:
    """Map, array of struct, variant, binary, decimal(38), timestamp_ntz and a null-only column,
    25 rows, in one commit or in chunks of 10. Chunked, with stop 9 and onFull reject, each call
    writes one chunk and is refused; replayed in other row orders after an acknowledgement, the
    chunks are cut the same way (content-determined), so every row is in once."""
    path = str(tmp_path / "q")
    settings = {"stopCount": 9, "resumeCount": 5} if capacity else None
    queue = declare(spark, path, EVERY_TYPE, settings=settings)
    batch = every_type_batch(spark, 25)
    options = {"capacity": capacity, "onFull": "reject"} if capacity else {}
    for replay in range(3 if capacity else 1):
        try:
            QueueSink(path, options=options, app_id="p")(batch.orderBy(F.desc("id") if replay % 2 else "id"), 0)
        except QueueFullError:
            queue.acknowledge("default", queue.refresh())
    assert [count for _v, count, _s in sink_commits(path)] == ([10, 10, 5] if capacity else [25])
    QueueSink(path, options=options, app_id="p")(batch.repartition(3), 0)
    assert as_text(table(spark, path)) == as_text(batch)


def test_schema_mismatch_inside_a_nested_type_names_the_real_difference(spark: SparkSession,
                                                                      tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    declare(spark, path, "id BIGINT, tags MAP<STRING, STRING>")
    batch = spark.sql("SELECT id, map('k', id) AS tags FROM range(2)")
    with pytest.raises(SchemaMismatchError, match=r"tags is map<string,bigint>, queue has map<string,string>"):
        QueueSink(path, app_id="p")(batch, 0)
    assert row_count(path) == 0


# --- reject policies never leave part of a batch in ------------------------------------------


@pytest.mark.parametrize("on_full", ["reject", "reject-after"])
def test_a_routed_batch_refused_by_one_queue_is_written_to_none(spark: SparkSession, tmp_path: Path,
                                                                 on_full: str) -> None:
    """Rows for queues ``a`` (flow-OFF) and ``b`` (flow-stopped): every destination is looked at
    before the first write, so the refusal by ``b`` leaves ``a`` untouched."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    declare(spark, a, SCHEMA)
    declare(spark, b, SCHEMA, settings={"stopCount": 5, "resumeCount": 3})
    fill_until_stopped(spark, b, 10, "reject")
    before = latest_version(a)
    batch = spark.createDataFrame([(i, f"m{i}", a if i % 2 else b) for i in range(6)], "id BIGINT, body STRING, dest STRING")
    sink = QueueSink(route_column="dest", options={"onFull": on_full, "rejectTimeout": "200ms"}, app_id="p")
    with pytest.raises(FlowControlError, match=r"queue 'b' refused the batch"):
        sink(batch, 0)
    assert latest_version(a) == before and row_count(a) == 0


def test_reject_after_between_chunks_says_how_many_rows_are_in(spark: SparkSession, tmp_path: Path) -> None:
    """Stop 9, capacity 10, 18 rows, reject-after 300 ms: the first chunk turns the queue ON and
    the hold before the second times out. The error says 10 of the 18 rows are in and that a
    restart writes the other 8; the replay after an acknowledgement does exactly that."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 9, "resumeCount": 5})
    options = {"capacity": 10, "onFull": "reject-after", "rejectTimeout": "300ms"}
    df = messages(spark, range(18))
    with pytest.raises(QueueFullTimeoutError,
                       match=r"10 of the 18 messages of batch 3 are in queue 'q'; a restart of the query writes "
                             r"the other 8"):
        QueueSink(path, options=options, app_id="p")(df, 3)
    assert row_count(path) == 10
    queue.acknowledge("default", queue.refresh())
    QueueSink(path, options=options, app_id="p")(df, 3)
    assert_same_rows(table(spark, path), df)
