"""Dead letters: a poison message is found alone and moved to the dead-letter queue after its
deliveries, every other message is processed exactly once and in order, and the pipeline goes on;
without the valve the same message holds every producer upstream."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from support.docs import python_blocks
from support.stores import IO_SCHEMA, Io
from support.streams import is_held, wait_until

from spark_flow.exceptions import QueueFullError
from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.rules.depth import Depth, Position
from spark_flow.rules.flow_state import Thresholds
from spark_flow.spark.dead_letters import DeadLetters
from spark_flow.spark.declare import declare
from spark_flow.spark.listener import FlowProgressListener
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue

SCHEMA = "id BIGINT, body STRING"


def messages(spark: SparkSession, count: int, poison: set[int]) -> DataFrame:
    """``count`` messages whose body is their id, but for ``poison``: not a number."""
    return spark.range(count).selectExpr(
        "id", f"CASE WHEN id IN ({','.join(map(str, poison)) or -1}) THEN 'poison' ELSE CAST(id AS STRING) END AS body")


def parse(batch: DataFrame) -> DataFrame:
    """What a consumer does with a message: its body as a number (Spark's ANSI cast raises for a
    body that is not one: the poison)."""
    return batch.select("id", F.col("body").cast("bigint").alias("amount"))


def appender(output: Path, calls: list[int] | None = None) -> Callable[[DataFrame, int], None]:
    """A consumer's foreachBatch: parse, then append once (Delta's idempotent write)."""
    def process(batch: DataFrame, batch_id: int) -> None:
        if calls is not None:
            calls.append(batch_id)
        (parse(batch).write.format("delta").mode("append").option("txnAppId", "consumer")
         .option("txnVersion", str(batch_id)).save(str(output)))

    return process


def consume_all(spark: SparkSession, queue: str, process: Callable[[DataFrame, int], None], checkpoint: Path,
                **options: object) -> StreamingQuery:
    query = (read_queue(spark, queue, **options).writeStream.foreachBatch(DeadLetters(process, queue))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(300)
    if query.exception() is not None:
        raise query.exception()  # type: ignore[misc]
    return query


def ids(spark: SparkSession, path: Path | str) -> list[int]:
    return [row.id for row in spark.read.format("delta").load(str(path)).select("id").collect()]


def test_a_batch_of_10000_with_one_poison_message_moves_that_one(spark: SparkSession, tmp_path: Path,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    path, output, calls = str(tmp_path / "events"), tmp_path / "out", []
    queue = declare(spark, path, SCHEMA, settings={"maxDeliveries": 2})
    QueueSink(path, app_id="load", options={"capacity": 20_000})(messages(spark, 10_000, {4321}), 0)
    loaded = queue.refresh()

    query = consume_all(spark, path, appender(output, calls), tmp_path / "chk")

    delivered = ids(spark, output)
    assert sorted(delivered) == [i for i in range(10_000) if i != 4321], "every other message exactly once"
    assert len(calls) < 40, f"found by halving, in {len(calls)} calls"
    [progress] = [p for p in query.recentProgress if p.numInputRows]
    [flow] = FlowProgressListener(storage_options={}).reports(progress)
    assert (flow.count, flow.processed) == (10_000, 9_999), "the batch's messages, once each; all but the poison"
    assert flow.redelivered > 10_000, "every part after the whole batch, its halves' sizes"
    assert "DataFrameQueryContextLogger" not in capfd.readouterr().err, "PySpark's ERROR entry of a handled failure"
    assert calls == sorted(calls), "each call has its own, increasing batch id"
    letters = spark.read.format("delta").load(path + "_dlq").collect()
    assert len(letters) == 1
    letter = letters[0]
    assert (letter.id, letter.body, letter._origin_queue, letter._origin_subscription) == (4321, "poison", "events",
                                                                                          "default")
    assert (letter._origin_position, letter._origin_index, letter._deliveries) == (loaded, 4321, 2)
    assert "CAST_INVALID_INPUT" in letter._error and "poison" in letter._error
    sub = queue.subscriptions.get("default")
    assert (sub.dead_lettered_count, queue.depth().count) == (1, 0)

    admin = FlowAdmin(str(tmp_path / "home"))
    dead_letters = Queue(path + "_dlq")
    assert dead_letters.depth().count == 1, "a dead-letter queue is a queue: its depth counts its letters"
    replayed = admin_replay(admin, queue, dead_letters)
    assert replayed == [1, 0], "replayed once"
    assert sorted(row.id for row in spark.read.format("delta").load(path).filter("id = 4321").collect()) == [4321] * 2


def admin_replay(admin: FlowAdmin, origin: Queue, dead_letters: Queue) -> list[int]:
    """Replay twice through the admin's API, with the origin registered as an operator would."""
    admin.registry.register(origin.name, origin.path)
    return [admin.replay_dead_letters(origin.name), admin.replay_dead_letters(origin.name)]


def test_a_redelivery_stopped_in_the_middle_goes_on_where_it_stopped(spark: SparkSession, io: Io) -> None:
    """The query fails half-way through finding a poison message (a downstream queue refuses a
    part: not the messages' fault, so the batch fails); restarted, it goes on from its record:
    parts done are not delivered again, every message is written once, the poison message is in
    the dead-letter queue. Through either store (``io``): on governed compute's, the engine, the
    consumer reads with Delta's source and the dead-letter queue is a table of the queue's schema."""
    path, output, calls = io.queue("events"), io.base / "out", []
    declare(spark, path, SCHEMA, settings={"maxDeliveries": 1})
    QueueSink(path, app_id="load", options={"capacity": 1000})(messages(spark, 64, {50}), 0)
    write = appender(output, calls)

    def refuse_once(batch: DataFrame, batch_id: int) -> None:
        if len(calls) == 3 and not refused:
            refused.append(batch_id)
            raise QueueFullError("downstream", Depth(9, 9), Thresholds(5, 5), "onFull reject")
        write(batch, batch_id)

    refused: list[int] = []
    with pytest.raises(Exception, match=r"QueueFullError|refused the batch"):
        consume_all(spark, path, refuse_once, io.base / "chk")
    assert refused and len(calls) == 3
    consume_all(spark, path, refuse_once, io.base / "chk")

    assert sorted(ids(spark, output)) == [i for i in range(64) if i != 50]
    assert calls == sorted(set(calls)), "no call id used twice"
    assert refused[0] in calls[3:], "the part in flight was delivered again with its own id"
    assert [(row.id, row._deliveries) for row in io.table(spark, path + "_dlq").collect()] == [(50, 1)]
    if io.mode == "engine":  # named as its queue was declared, its state tables too
        assert spark.catalog.tableExists(f"{IO_SCHEMA}.{IO_SCHEMA}_events_dlq_subscriptions")
    assert Queue(path).subscriptions.get("default").dead_lettered_count == 1


def test_a_poison_message_in_a_chain_is_moved_and_the_pipeline_goes_on(spark: SparkSession, tmp_path: Path) -> None:
    """ingest -> events -> enrich -> enriched, hold producers. With the valve on, the message
    that makes enrich raise is moved and ingest goes on, every other message enriched once and
    in order; with it off, the same message stops enrich and holds ingest."""
    processed: list[int] = []  # the ids enrich processed, call after call, each part in the queue's order

    def chain(name: str, max_deliveries: int) -> tuple[Queue, Queue, list[StreamingQuery]]:
        events, enriched = str(tmp_path / name / "events"), str(tmp_path / name / "enriched")
        queue = declare(spark, events, SCHEMA, settings={"stopCount": 30, "resumeCount": 10,
                                                        "maxDeliveries": max_deliveries})
        out = declare(spark, enriched, "id BIGINT, amount BIGINT")
        source = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
                  .selectExpr("value AS id", "CASE WHEN value = 7 THEN 'poison' ELSE CAST(value AS STRING) END AS body"))
        ingest = (source.writeStream.foreachBatch(QueueSink(events, options={"capacity": 10}))
                  .option("checkpointLocation", str(tmp_path / name / "chk-ingest"))
                  .trigger(processingTime="200 milliseconds").start())
        sink = QueueSink(enriched)

        def enrich(batch: DataFrame, batch_id: int) -> None:
            sink(parse(batch), batch_id)
            processed.extend(row.id for row in batch.orderBy("_position", "id", "body").select("id").collect())

        stage = (read_queue(spark, events, maxRecordsPerTrigger=20).writeStream
                 .foreachBatch(DeadLetters(enrich, events))
                 .option("checkpointLocation", str(tmp_path / name / "chk-enrich"))
                 .trigger(processingTime="200 milliseconds").start())
        return queue, out, [ingest, stage]

    queue, out, (ingest, stage) = chain("valve", max_deliveries=2)
    try:
        # More than stop + capacity (40) enriched: ingest was held and resumed on.
        wait_until(lambda: out.depth().count > 45, 120)
        ingest.stop()
        events = queue.read(Position(-1), Position(queue.refresh())).column("id").to_pylist()
        # Enrich stopped mid-batch could have written a batch it had not recorded yet: it drains first.
        wait_until(lambda: len(processed) == len(events) - 1, 120)
    finally:
        ingest.stop()
        stage.stop()
    enriched = out.read(Position(-1), Position(out.refresh())).column("id").to_pylist()
    assert 7 not in enriched and sorted(enriched) == sorted(processed), "the poison moved, every other message once"
    assert processed == [i for i in events if i != 7][:len(processed)], "processed in the queue's order"
    assert queue.subscriptions.get("default").dead_lettered_count == 1
    assert [row.id for row in spark.read.format("delta").load(queue.path + "_dlq").collect()] == [7]

    queue, out, (ingest, stage) = chain("no-valve", max_deliveries=0)
    try:
        wait_until(lambda: not stage.isActive, 120)
        assert "poison" in str(stage.exception())
        wait_until(lambda: queue.subscriptions.get("default").flow_stopped and is_held(ingest), 60)
        depth = queue.depth().count
        time.sleep(1.5)  # held: the producer adds nothing while the queue stays stopped
        assert queue.depth().count == depth <= 30 + 10
        before_poison = queue.read(Position(-1), Position(queue.refresh())).column("id").to_pylist().index(7)
        assert is_held(ingest) and out.depth().count <= before_poison, "nothing after the poison message went on"
    finally:
        ingest.stop()


def test_when_a_consumer_fails_as_written(spark: SparkSession, tmp_path: Path) -> None:
    """The dead-letter examples of docs/operations.md, in order, with their paths under a temporary folder:
    order 2 is moved, 1 and 3 reach amounts; replayed once, it is in orders again."""
    first, second = [block.replace("/data/", f"{tmp_path}/data/").replace("/chk/", f"{tmp_path}/chk/")
                     for block in python_blocks("docs/operations.md", "When a consumer fails")]
    namespace: dict[str, object] = {}
    try:
        exec(compile(first, "docs/operations.md", "exec"), namespace)
        amounts, orders = Queue(f"{tmp_path}/data/queues/amounts"), namespace["orders"]
        wait_until(lambda: amounts.depth().count == 2 and orders.depth().count == 0, 120)  # type: ignore[attr-defined]
        namespace["enricher"].stop()  # type: ignore[attr-defined]  # "once the consumer is fixed"
        exec(compile(second, "docs/operations.md", "exec"), namespace)
        assert sorted(amounts.read(Position(-1), Position(amounts.refresh())).column("id").to_pylist()) == [1, 3]
        assert FlowAdmin(f"{tmp_path}/data/flow").replay_dead_letters("orders") == 0, "replayed once"
        assert sorted(ids(spark, f"{tmp_path}/data/queues/orders")) == [1, 2, 2, 3]
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.conf.unset("spark.flow.home")
