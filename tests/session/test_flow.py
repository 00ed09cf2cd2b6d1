"""Producer flow control end to end: streaming producers held and resumed by a queue's depth."""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from support.invariants import assert_transitions_follow_thresholds
from support.stores import Io
from support.streams import drain, is_held, start_consumer, start_producer, wait_until

from spark_flow.spark.declare import declare
from spark_flow.spark.source import read_queue

SCHEMA = "id BIGINT, producer STRING"


def test_qpid_capacity_example_two_producers_bounded_then_resumed(spark: SparkSession, io: Io) -> None:
    """Stop 100, producers of capacity 50 and 15, no consumer: the depth stays <= 165 and both
    are held; a held query stops promptly and restarts; once a consumer drains under resume
    both go on, and every message arrives exactly once. In both stores (through the engine, the
    queue and its home by catalog name)."""
    path, tmp_path = io.queue("q"), io.base
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 100, "resumeCount": 50})
    p1, _ = start_producer(spark, path, tmp_path / "p1", "p1", 200, options={"capacity": 50})
    p2, _ = start_producer(spark, path, tmp_path / "p2", "p2", 60, options={"capacity": 15})
    wait_until(lambda: is_held(p1) and is_held(p2) and queue.subscriptions.get("default").flow_stopped, 90)
    time.sleep(3)  # held producers add nothing more
    depth = queue.depths()["default"]
    assert 100 < depth.count <= 165
    assert queue.subscriptions.get("default").flow_stopped
    assert is_held(p1) and is_held(p2)

    started = time.monotonic()
    p2.stop()
    assert time.monotonic() - started < 10, "a held query stops promptly"
    p2, _ = start_producer(spark, path, tmp_path / "p2", "p2", 60, options={"capacity": 15})

    held_counts = _counts_by_producer(io.table(spark, path))
    consumer = start_consumer(spark, path, tmp_path / "c", tmp_path / "out", **_limit(io.mode, 40))
    wait_until(lambda: not queue.subscriptions.get("default").flow_stopped, 90)
    wait_until(lambda: all(n > held_counts.get(p, 0) for p, n in _counts_by_producer(io.table(spark, path)).items())
               and len(_counts_by_producer(io.table(spark, path))) == 2, 90)
    p1.stop()
    p2.stop()
    drain(queue)
    consumer.stop()

    enqueued = io.table(spark, path)
    delivered = spark.read.format("delta").load(str(tmp_path / "out"))
    assert delivered.count() == enqueued.count() > 165
    assert delivered.groupBy("producer", "id").count().filter("count > 1").count() == 0
    assert enqueued.groupBy("producer", "id").count().filter("count > 1").count() == 0
    max_depth = _max_depth_while_stopped(queue)
    assert max_depth <= 165


def _limit(mode: str, messages: int) -> dict[str, int]:
    """A consumer's read limit: Delta's source (the engine's consumer) limits by files, one
    or two a commit here."""
    return {"maxRecordsPerTrigger": messages} if mode == "deltalake" else {"maxFilesPerTrigger": 2}


def _counts_by_producer(messages: DataFrame) -> dict[str, int]:
    return {r["producer"]: r["count"] for r in messages.groupBy("producer").count().collect()}


def _max_depth_while_stopped(queue) -> int:
    """The deepest depth any gate recorded at a transition (the history of the queue)."""
    return max((row["depth_count"] for row in queue.history.read()), default=0)


def test_900_500_on_a_1000_queue_through_spark(spark: SparkSession, tmp_path: Path) -> None:
    """flowStopped turns ON after the 901st message (within one capacity window) and OFF only
    under 500 messages."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"qpid.max_count": 1000, "qpid.flow_stop_count": 900,
                                                   "qpid.flow_resume_count": 500})
    producer, _ = start_producer(spark, path, tmp_path / "p", "p", 400, options={"capacity": 100})
    wait_until(lambda: is_held(producer) and queue.depths()["default"].count > 900, 120)
    consumer = start_consumer(spark, path, tmp_path / "c", tmp_path / "out", maxRecordsPerTrigger=150)
    wait_until(lambda: any(not r["flow_stopped"] for r in queue.history.read()), 120)
    producer.stop()
    consumer.stop()
    history = queue.history.read()
    on, off = history[0], next(r for r in history if not r["flow_stopped"])
    assert on["flow_stopped"] and on["flow_stopped_count"] == 1
    assert 900 < on["depth_count"] <= 1000
    assert off["depth_count"] < 500
    assert (on["stop_count"], on["resume_count"]) == (900, 500)


def test_exactly_once_across_restarts(spark: SparkSession, tmp_path: Path) -> None:
    """Producer and consumer stopped and restarted mid-stream from their checkpoints: every
    message arrives once, in enqueue order per producer (a capacity no batch reaches: the
    chunks of a larger batch are cut in content order, not in production order)."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 400, "resumeCount": 200})
    for round_ in range(3):
        producer, _ = start_producer(spark, path, tmp_path / "p", "p", 100, options={"capacity": 1_000_000})
        consumer = start_consumer(spark, path, tmp_path / "c", tmp_path / "out")
        wait_until(lambda p=producer: p.lastProgress is not None and p.lastProgress["numInputRows"] > 0, 60)
        time.sleep(2)
        first, second = (producer, consumer) if round_ % 2 == 0 else (consumer, producer)
        first.stop()
        second.stop()
    consumer = start_consumer(spark, path, tmp_path / "c", tmp_path / "out")
    drain(queue)
    consumer.stop()
    enqueued = spark.read.format("delta").load(path)
    delivered = spark.read.format("delta").load(str(tmp_path / "out"))
    ids = [r["id"] for r in delivered.orderBy("id").select("id").collect()]
    assert ids == list(range(len(ids))) and len(ids) > 0, "every id once, none lost"
    assert enqueued.count() == len(ids)
    positions = [r["_position"] for r in delivered.orderBy("id").select("_position").collect()]
    assert positions == sorted(positions), "enqueue order follows production order"


def test_gated_source_propagates_backpressure_up_a_chain(spark: SparkSession, tmp_path: Path) -> None:
    """A -> stage -> B: with B stopped the stage admits nothing, A fills up and its producer is
    held; a consumer on B releases the whole chain."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    queue_a = declare(spark, a, SCHEMA, settings={"stopCount": 60, "resumeCount": 30})
    queue_b = declare(spark, b, SCHEMA, settings={"stopCount": 50, "resumeCount": 20})
    producer, _ = start_producer(spark, a, tmp_path / "p", "p", 100, options={"capacity": 20})
    stage = (read_queue(spark, a, downstream=b, maxRecordsPerTrigger=20).drop("_position", "_enqueue_time")
             .writeStream.format("delta").option("checkpointLocation", str(tmp_path / "stage"))
             .trigger(processingTime="500 milliseconds").start(b))
    wait_until(lambda: queue_b.subscriptions.get("default").flow_stopped, 90)
    wait_until(lambda: queue_a.subscriptions.get("default").flow_stopped and is_held(producer), 90)
    assert queue_b.depths()["default"].count <= 50 + 20  # stop + one admitted batch
    wait_until(lambda: not is_held(stage), 10)  # the gated stage holds no thread

    held_count = spark.read.format("delta").load(a).count()
    consumer = (read_queue(spark, b).drop("_position", "_enqueue_time")
                .writeStream.format("delta").option("checkpointLocation", str(tmp_path / "c"))
                .trigger(processingTime="500 milliseconds").start(str(tmp_path / "out")))
    wait_until(lambda: not queue_b.subscriptions.get("default").flow_stopped, 90)
    wait_until(lambda: spark.read.format("delta").load(a).count() > held_count, 90)  # the producer goes on
    producer.stop()
    drain(queue_a)
    drain(queue_b)
    stage.stop()
    consumer.stop()
    delivered = spark.read.format("delta").load(str(tmp_path / "out"))
    assert delivered.count() == spark.read.format("delta").load(a).count()
    assert delivered.groupBy("id").count().filter("count > 1").count() == 0


def test_a_queue_held_by_the_age_of_its_oldest_message_and_released_by_age(spark: SparkSession,
                                                                             tmp_path: Path) -> None:
    """stopAge 3s / resumeAge 1s, no count or size limit, no consumer: the producer is held once
    the oldest message has waited over 3 s, however few messages wait, and stays held; a
    consumer acknowledges them, the oldest waiting message is younger than 1 s, and the
    producer goes on. The recorded transitions carry the ages that caused them."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopAge": "3s", "resumeAge": "1s"})
    assert queue.settings().thresholds.stop_count == 0
    producer, _ = start_producer(spark, path, tmp_path / "p", "p", 10)
    try:
        wait_until(lambda: is_held(producer) and queue.subscriptions.get("default").flow_stopped, 90)

        def settled() -> bool:  # a batch admitted before the stop may still land; then nothing more
            before = queue.depths()["default"]
            time.sleep(3)
            return queue.depths()["default"] == before and is_held(producer)

        wait_until(settled, 60)
        held = queue.depths()["default"]
        assert held.count < 200, "few messages, held by their age"

        consumer = start_consumer(spark, path, tmp_path / "c", tmp_path / "out")
        wait_until(lambda: not queue.subscriptions.get("default").flow_stopped, 90)
        wait_until(lambda: spark.read.format("delta").load(path).count() > held.count, 60)
    finally:
        producer.stop()
    drain(queue)
    consumer.stop()

    stop, resume = queue.history.read()[:2]
    assert (stop["flow_stopped"], stop["flow_stopped_count"], stop["stop_age"], stop["resume_age"]) == (
        True, 1, 3.0, 1.0)
    assert stop["depth_age"] > 3.0 and stop["depth_count"] <= held.count
    assert (resume["flow_stopped"], resume["flow_stopped_count"]) == (False, 1) and resume["depth_age"] < 1.0
    assert_transitions_follow_thresholds(queue.history.read())
