"""The flowqueue streaming source: a subscription's messages in enqueue order, acknowledged
once Spark has completed them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadAllAvailable
from support.streams import wait_until

from spark_flow.flow.queue import Queue
from spark_flow.records.subscriptions import SubscriptionTable
from spark_flow.rules.depth import Depth, Position
from spark_flow.spark.declare import declare, purge_acknowledged
from spark_flow.spark.offsets import offset_position
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import FlowQueueDataSource, read_queue

SCHEMA = "id BIGINT, body STRING"
TIMEOUT = 90


def append(spark: SparkSession, queue: Queue, first: int, count: int, files: int = 1) -> int:
    """One plain delta-spark append of messages ``first..first+count-1`` (in ``files`` files
    of shuffled rows); return its version."""
    rows = [(i, f"m{i}") for i in range(first, first + count)]
    frame = spark.createDataFrame(rows, SCHEMA)
    frame = frame.repartition(files) if files > 1 else frame
    frame.write.format("delta").mode("append").save(queue.path)
    return queue.refresh()


def enqueued(spark: SparkSession, queue: Queue) -> DataFrame:
    """Every message of the queue with its commit version, read with Spark's own change feed."""
    return (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
            .load(queue.path).where("_change_type = 'insert'")
            .select("id", "body", F.col("_commit_version").alias("_position")))


def consume(stream: DataFrame, checkpoint: Path) -> tuple[StreamingQuery, DataFrame]:
    """Read everything available into a memory table; return the ended query and the table."""
    name = f"out_{uuid.uuid4().hex}"
    query = (stream.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT), "the availableNow query did not end"
    assert query.exception() is None
    return query, stream.sparkSession.table(name)


def consume_batches(stream: DataFrame, checkpoint: Path,
                    handle: Callable[[DataFrame, int], None] | None = None) -> list[tuple[int, list[int]]]:
    """Run an availableNow foreachBatch consumer; return the ids of each batch it saw."""
    seen: list[tuple[int, list[int]]] = []

    def batch_function(batch: DataFrame, batch_id: int) -> None:
        ids = sorted(row.id for row in batch.select("id").collect())
        if handle is not None:
            handle(batch, batch_id)
        seen.append((batch_id, ids))

    query = (stream.writeStream.foreachBatch(batch_function).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(TIMEOUT), "the availableNow query did not end"
    finally:
        query.stop()
    return seen


@pytest.fixture
def queue(spark: SparkSession, tmp_path: Path) -> Queue:
    return declare(spark, str(tmp_path / "q"), SCHEMA)


@pytest.fixture(scope="module")
def one_message_queue(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Queue:
    """A queue holding one message, shared by tests that must not change it."""
    queue = declare(spark, str(tmp_path_factory.mktemp("shared") / "q"), SCHEMA)
    append(spark, queue, 0, 1)
    return queue


def test_read_everything_then_acknowledged(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """Every message once, with its commit version; afterwards the subscription is at the end."""
    append(spark, queue, 0, 3)
    QueueSink(queue.path, app_id="t")(spark.createDataFrame([(3, "m3"), (4, "m4")], SCHEMA), 0)
    last = append(spark, queue, 5, 4)

    stream = read_queue(spark, queue.path)
    assert stream.isStreaming
    assert stream.schema.simpleString() == "struct<id:bigint,body:string,_position:bigint,_enqueue_time:timestamp>"
    _query, out = consume(stream, tmp_path / "chk")

    assert_df_equality(out.select("id", "body", "_position"), enqueued(spark, queue),
                       ignore_row_order=True, ignore_nullable=True)
    commit_times = {info["version"]: info["timestamp"] for info in DeltaTable(queue.path).history()}
    enqueue_times = {(row._position, row.ms) for row in out.select("_position", F.unix_millis("_enqueue_time")
                                                                   .alias("ms")).collect()}
    assert enqueue_times == {(v, commit_times[v]) for v, _ in enqueue_times}, "_enqueue_time is the commit's time"
    assert queue.subscriptions.get("default").position == last
    assert queue.depths() == {"default": Depth(0, 0)}


def test_max_records_per_trigger(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """maxRecordsPerTrigger 120 over commits of 1,000 (in 3 files), 37 and 500 messages:
    batches of exactly 120, all full but the last, every message once and in enqueue order;
    batches end inside commits, and offsets say where."""
    append(spark, queue, 0, 1000, files=3)
    append(spark, queue, 1000, 37)
    last = append(spark, queue, 1037, 500)
    seen = consume_batches(read_queue(spark, queue.path, maxRecordsPerTrigger=120), tmp_path / "chk")

    assert [len(ids) for _batch, ids in seen] == [120] * 12 + [97]
    assert [i for _batch, ids in seen for i in ids] == list(range(1537))
    offsets = [json.loads(line) for line in (tmp_path / "chk" / "offsets" / "0").read_text().splitlines()[2:]]
    assert (offsets[0]["version"], offsets[0]["index"]) == (last - 3, 120), "120 messages into the first commit"
    assert queue.subscriptions.get("default").acknowledged == Position(last)
    assert queue.depths() == {"default": Depth(0, 0)}


def test_a_batch_inside_a_commit_is_replayed_exactly(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """One commit of 1,000 messages in 4 files, 120 at a time; the consumer fails in its third
    batch. The ack position is inside the commit, after the 240 messages delivered. Restarted
    from the checkpoint, Spark replays the third batch with its logged offsets: the very same
    120 messages, and every message is delivered once."""
    version = append(spark, queue, 0, 1000, files=4)
    attempts: dict[int, list[list[int]]] = {}

    def fail_third(batch: DataFrame, batch_id: int) -> None:
        attempts.setdefault(batch_id, []).append(sorted(row.id for row in batch.select("id").collect()))
        if batch_id == 2 and len(attempts[2]) == 1:
            raise RuntimeError("consumer failed")

    with pytest.raises(PySparkException, match="consumer failed"):
        consume_batches(read_queue(spark, queue.path, maxRecordsPerTrigger=120), tmp_path / "chk", fail_third)
    assert queue.subscriptions.get("default").acknowledged == Position(version - 1, 240)
    assert queue.depth() == Depth(760, queue.ledger.commits(version - 1)[0].part(240, 1000).size)

    seen = consume_batches(read_queue(spark, queue.path, maxRecordsPerTrigger=120), tmp_path / "chk", fail_third)
    assert attempts[2][0] == attempts[2][1], "the replay read another slice of the commit"
    delivered = [i for _batch, ids in seen for i in ids] + [i for b in (0, 1) for i in attempts[b][0]]
    assert sorted(delivered) == list(range(1000))
    assert queue.depths() == {"default": Depth(0, 0)}


def test_commit_after_the_next_batch_acknowledged_it_reads_nothing(spark: SparkSession, queue: Queue,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark commits batch N to the source after planning batch N+1, whose ``latestOffset``
    acknowledged N already: that ``commit`` is answered in the reader's process, without a look
    at the subscriptions table. A commit of a batch not acknowledged yet still acknowledges it."""
    first = append(spark, queue, 0, 3)
    source = FlowQueueDataSource({"queue": queue.path})
    reader = source.streamReader(source.schema())  # as Spark starts a query: its schema asked, then its reader
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert offset_position(end) == Position(first)
    reader.commit(end)  # not acknowledged yet: this commit acknowledges it
    assert queue.subscriptions.get("default").acknowledged == Position(first)

    second = append(spark, queue, 3, 2)
    after = reader.latestOffset(end, ReadAllAvailable())
    assert reader.latestOffset(after, ReadAllAvailable()) == after  # acknowledges after; nothing new
    looks: list[str] = []
    listed = SubscriptionTable.list
    monkeypatch.setattr(SubscriptionTable, "list", lambda table: looks.append(table.queue) or listed(table))
    reader.commit(after)
    assert looks == [], "the commit of an acknowledged batch looked at the subscriptions table"
    assert queue.subscriptions.get("default").acknowledged == Position(second)


def enqueue(spark: SparkSession, queue: Queue, first: int, count: int) -> None:
    """One sink commit of messages of exactly 100 bytes each (an 8-byte id, a 92-byte body)."""
    rows = [(i, f"{i:092d}") for i in range(first, first + count)]
    QueueSink(queue.path, app_id="bytes")(spark.createDataFrame(rows, SCHEMA), first)


def test_max_bytes_per_trigger(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """Commits of 300, 300, 200, 1500 and 100 bytes of 100-byte messages: with a limit of 750
    bytes each batch is 7 whole messages, across and inside commits. With a Spark-style ``1k``
    and ``maxRecordsPerTrigger`` 5 too, a batch stays within both; with 50 bytes, a message
    larger than the limit comes alone."""
    for first, count in ((0, 3), (3, 3), (6, 2), (8, 15), (23, 1)):
        enqueue(spark, queue, first, count)

    seen = consume_batches(read_queue(spark, queue.path, maxBytesPerTrigger=750), tmp_path / "c1")
    assert [100 * len(ids) for _batch, ids in seen] == [700, 700, 700, 300]
    assert [i for _batch, ids in seen for i in ids] == list(range(24))

    queue.create_subscription("both", "earliest")
    stream = read_queue(spark, queue.path, subscription="both", maxBytesPerTrigger="1k", maxRecordsPerTrigger=5)
    assert [len(ids) for _batch, ids in consume_batches(stream, tmp_path / "c2")] == [5, 5, 5, 5, 4]
    assert queue.depths() == {"default": Depth(0, 0), "both": Depth(0, 0)}

    small = declare(spark, str(tmp_path / "small"), SCHEMA)
    enqueue(spark, small, 0, 3)
    seen = consume_batches(read_queue(spark, small.path, maxBytesPerTrigger=50), tmp_path / "c3")
    assert [ids for _batch, ids in seen] == [[0], [1], [2]]


def test_min_records_per_trigger_waits_at_most_max_trigger_delay(spark: SparkSession, queue: Queue,
                                                                  tmp_path: Path) -> None:
    """minRecordsPerTrigger 10, maxTriggerDelay 6s: 10 waiting messages are read at once; 3 wait
    until 6 s after the last batch, no longer; 12 arriving after that are read at once again."""
    delay = 6.0
    batches: list[tuple[float, int]] = []

    def batch_function(batch: DataFrame, _batch_id: int) -> None:
        batches.append((time.monotonic(), batch.count()))

    append(spark, queue, 0, 10)
    stream = read_queue(spark, queue.path, minRecordsPerTrigger=10, maxTriggerDelay=f"{delay:g}s")
    query = (stream.writeStream.foreachBatch(batch_function).option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(batches) == 1, TIMEOUT)
        append(spark, queue, 10, 3)
        wait_until(lambda: len(batches) == 2, TIMEOUT)
        sent = time.monotonic()
        append(spark, queue, 13, 12)
        wait_until(lambda: len(batches) == 3, TIMEOUT)
    finally:
        query.stop()
    (first, ten), (second, three), (third, twelve) = batches
    assert (ten, three, twelve) == (10, 3, 12)
    assert delay - 1.0 <= second - first <= delay + 5.0, "3 messages wait for maxTriggerDelay, no longer"
    assert third - sent < delay - 1.0, "12 messages are read without waiting"


def test_min_records_per_trigger_not_waited_for_under_available_now(spark: SparkSession, queue: Queue,
                                                                    tmp_path: Path) -> None:
    """Trigger.AvailableNow ends at the queue's end as it was at the start: no more messages can
    come, so a minimum is not waited for (the default maxTriggerDelay is 15 minutes)."""
    append(spark, queue, 0, 3)
    started = time.monotonic()
    _query, out = consume(read_queue(spark, queue.path, minRecordsPerTrigger=1000), tmp_path / "chk")
    assert out.count() == 3
    assert time.monotonic() - started < 60


def test_two_subscriptions_read_independently(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """Each subscription gets every message once; acknowledging one leaves the other's depth."""
    queue.create_subscription("audit", "earliest")
    append(spark, queue, 0, 4)
    append(spark, queue, 4, 2)

    _q, first = consume(read_queue(spark, queue.path), tmp_path / "c1")
    assert first.count() == 6
    assert queue.depths()["default"] == Depth(0, 0)
    assert queue.depths()["audit"].count == 6

    last = append(spark, queue, 6, 1)
    _q, second = consume(read_queue(spark, queue.path, subscription="audit"), tmp_path / "c2")
    assert sorted(r.id for r in second.collect()) == list(range(7))
    assert queue.subscriptions.get("audit").position == last
    assert queue.depths()["audit"] == Depth(0, 0)
    assert queue.depths()["default"].count == 1


def test_starting_position_latest_skips_existing_messages(spark: SparkSession, queue: Queue,
                                                          tmp_path: Path) -> None:
    """A new subscription at ``latest`` starts after the messages already enqueued."""
    append(spark, queue, 0, 3)
    stream = read_queue(spark, queue.path, subscription="late", startingPosition="latest")
    _q, out = consume(stream, tmp_path / "chk")
    assert out.count() == 0
    assert queue.depth("late") == Depth(0, 0)

    # An existing subscription goes on from its acknowledged position, whatever startingPosition
    # says (a memory sink cannot restart from a checkpoint: a new consumer takes over).
    append(spark, queue, 3, 2)
    _q, out = consume(read_queue(spark, queue.path, subscription="late", startingPosition="latest"),
                      tmp_path / "chk2")
    assert sorted(r.id for r in out.collect()) == [3, 4]


def test_unknown_subscription_names_it(spark: SparkSession, one_message_queue: Queue, tmp_path: Path) -> None:
    """Without startingPosition a subscription must exist; the error (raised in the source's
    Python worker, surfaced by Spark) names it, and none is created."""
    queue = one_message_queue
    with pytest.raises(PySparkException, match="subscription 'nobody' does not exist"):
        consume(read_queue(spark, queue.path, subscription="nobody"), tmp_path / "chk")
    assert [s.name for s in queue.subscriptions.list()] == ["default"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        pytest.param({"maxRecordsPerTrigger": "-1"}, "(?i)maxRecordsPerTrigger='-1'", id="negative limit"),
        pytest.param({"maxRecordsPerTrigger": "0"}, "(?i)maxRecordsPerTrigger='0'", id="zero limit"),
        pytest.param({"startingPosition": "middle"}, "(?i)startingPosition='middle'.*earliest or latest",
                     id="unknown position"),
        pytest.param({"maxRecordPerTrigger": "5"}, "(?i)maxRecordPerTrigger.*Did you mean 'maxRecordsPerTrigger'",
                     id="misspelled option"),
    ],
)
def test_bad_option_names_the_option(spark: SparkSession, one_message_queue: Queue, tmp_path: Path,
                                     options: dict[str, Any], match: str) -> None:
    """Spark lower-cases option names before the source sees them: match either spelling."""
    queue = one_message_queue
    with pytest.raises(PySparkException, match=match):
        consume(read_queue(spark, queue.path, **options), tmp_path / "chk")
    assert queue.subscriptions.get("default").position == -1


def test_failed_batch_is_not_acknowledged_and_is_delivered_again(spark: SparkSession, queue: Queue,
                                                                 tmp_path: Path) -> None:
    """A consumer that fails in batch 1 keeps batch 0 acknowledged and batch 1 not; restarted
    from its checkpoint it gets batch 1's messages again, and nothing twice."""
    versions = [append(spark, queue, 10 * i, 10) for i in range(3)]

    def fail_second(_batch: DataFrame, batch_id: int) -> None:
        if batch_id == 1:
            raise RuntimeError("consumer failed")

    stream = read_queue(spark, queue.path, maxRecordsPerTrigger=10)
    with pytest.raises(PySparkException, match="consumer failed"):
        consume_batches(stream, tmp_path / "chk", fail_second)
    assert queue.subscriptions.get("default").position == versions[0]
    assert queue.depth().count == 20

    seen = consume_batches(read_queue(spark, queue.path, maxRecordsPerTrigger=10), tmp_path / "chk")
    assert seen == [(1, list(range(10, 20))), (2, list(range(20, 30)))]
    assert queue.subscriptions.get("default").position == versions[-1]
    assert queue.depths() == {"default": Depth(0, 0)}


def test_the_end_moves_past_commits_without_messages(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """As Delta's source moves past its non-data commits: every message read (with a read
    limit: without one Spark asks for all there is, which always ended at the newest commit),
    then a property change (ALTER TABLE ... SET TBLPROPERTIES) and a purge's commit; the next
    run takes one batch of no messages that ends at the queue's newest version, and the
    subscription is there too (its lag is 0, not two commits that hold nothing)."""
    append(spark, queue, 0, 3)
    stream = read_queue(spark, queue.path, maxRecordsPerTrigger=100)
    assert [ids for _batch, ids in consume_batches(stream, tmp_path / "chk")] == [[0, 1, 2]]
    spark.sql(f"ALTER TABLE delta.`{queue.path}` SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 60 days')")
    assert purge_acknowledged(spark, queue.path) == 3
    latest = queue.refresh()

    assert consume_batches(stream, tmp_path / "chk") == [(1, [])]
    end = json.loads((tmp_path / "chk" / "offsets" / "1").read_text().splitlines()[-1])
    assert offset_position(end) == Position(latest)
    assert queue.subscriptions.get("default").acknowledged == Position(latest)


def test_a_second_query_on_a_live_subscription_is_refused(spark: SparkSession, queue: Queue, tmp_path: Path) -> None:
    """One subscription, one reader: a second streaming query on the subscription another live
    query reads fails at its start with an error naming the subscription and the other reader,
    and acknowledges nothing; the first goes on and gets every message once. When the first
    stops, a query may read the subscription (from where the first left it)."""
    import time

    def start(name: str) -> StreamingQuery:
        return (read_queue(spark, queue.path).writeStream.format("memory").queryName(name)
                .option("checkpointLocation", str(tmp_path / name)).trigger(processingTime="200 milliseconds").start())

    append(spark, queue, 0, 5)
    first = start("first_reader")
    deadline = time.monotonic() + TIMEOUT
    while queue.depths()["default"].count and time.monotonic() < deadline:
        time.sleep(0.2)
    reader = first.lastProgress["sources"][0]["endOffset"]
    second = start("second_reader")
    try:
        with pytest.raises(PySparkException) as refused:  # not refused: awaitTermination returns False
            second.awaitTermination(TIMEOUT)
        error = str(refused.value)
        assert "subscription 'default' of queue 'q' is being read by another query" in error, error
        assert json.loads(reader)["reader"] in error
        assert "SubscriptionInUseError" in error
        last = append(spark, queue, 5, 5)
        deadline = time.monotonic() + TIMEOUT
        while queue.subscriptions.get("default").position < last and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        first.stop()
    assert sorted(r.id for r in spark.table("first_reader").collect()) == list(range(10))
    assert spark.table("second_reader").count() == 0

    append(spark, queue, 10, 2)
    _q, third = consume(read_queue(spark, queue.path), tmp_path / "third")
    assert sorted(r.id for r in third.collect()) == [10, 11]
