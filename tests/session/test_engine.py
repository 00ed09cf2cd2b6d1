"""The two stores on one queue (docs/design.md 2.10): a queue written through the engine is read
and judged through deltalake alike, and the reverse; what only one store can do says so."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from support.streams import drain, is_held, start_consumer, start_producer, wait_until

from spark_flow.exceptions import ConfigurationError
from spark_flow.flow.queue import Queue
from spark_flow.rules.depth import METADATA_KEY, Depth
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.spark.declare import declare, purge_acknowledged
from spark_flow.spark.engine_source import acks
from spark_flow.spark.session import with_conf
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue
from spark_flow.store.engine import EngineTable
from spark_flow.store.lake import LakeTable

SCHEMA = "id BIGINT, producer STRING"


def _both(path: str) -> tuple[Queue, Queue]:
    engine, lake = Queue(path, {IO_OPTION: "engine"}), Queue(path, {IO_OPTION: "deltalake"})
    assert (type(engine._table), type(lake._table)) == (EngineTable, LakeTable)
    return engine, lake


def _same_judgement(engine: Queue, lake: Queue) -> None:
    """Both stores see one depth, one ack position and one flow state, at one version of the
    queue (a producer whose trigger is active may still be enqueuing its capacity window: a
    commit landing between the two reads is read again; CI once saw the engine count one
    commit fewer than deltalake at what both called the same version, left unexplained). The oldest message's time is its
    commit's, as each store reads it: Delta's history gives the commit file's time, deltalake
    the commit info's, which may be milliseconds apart."""
    def counted(depths: dict[str, Depth]) -> dict[str, tuple[int, int]]:
        return {sub: (d.count, d.size) for sub, d in depths.items()}

    read: dict[str, dict[str, Depth]] = {}

    def agree() -> bool:  # the engine answers from a read up to FRESH_FOR old
        read["engine"], read["lake"] = engine.depths(), lake.depths()
        return engine.version() == lake.version() and counted(read["engine"]) == counted(read["lake"])

    wait_until(agree, 10, 0.2)
    engine_depths, lake_depths = read["engine"], read["lake"]
    for sub, depth in engine_depths.items():
        oldest = lake_depths[sub].oldest
        assert (depth.oldest is None) == (oldest is None) and abs((depth.oldest or 0) - (oldest or 0)) < 1000
    assert engine.subscriptions.list() == lake.subscriptions.list()
    assert engine.history.read() == lake.history.read()
    assert engine.settings() == lake.settings()


def test_producers_and_consumers_in_different_stores_share_one_queue(spark: SparkSession, tmp_path: Path) -> None:
    """An engine producer and a deltalake producer held together at stop + their capacities;
    a deltalake (flowqueue) consumer of one subscription and an engine (Delta source) consumer
    of another release them: each subscription gets every message once, and at each step both
    stores judge the queue alike."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 40, "resumeCount": 20})
    engine, lake = _both(path)
    engine.create_subscription("engine")
    producers = [start_producer(spark, path, tmp_path / store, store, 50, options={"capacity": 10, IO_OPTION: store})[0]
                 for store in ("engine", "deltalake")]
    wait_until(lambda: all(is_held(p) for p in producers) and lake.subscriptions.get("default").flow_stopped, 120)
    _same_judgement(engine, lake)
    assert 40 < lake.depths()["default"].count <= 60
    consumers = [start_consumer(spark, path, tmp_path / "c1", tmp_path / "out1")]  # the session's store: deltalake
    spark.conf.set(IO_OPTION, "engine")
    try:  # the engine's: Delta's source
        consumers.append(start_consumer(spark, path, tmp_path / "c2", tmp_path / "out2", subscription="engine"))
    finally:
        spark.conf.unset(IO_OPTION)
    wait_until(lambda: not engine.subscriptions.get("default").flow_stopped, 120)
    # Each producer has written: the slower one may have been held before its first write (CI).
    wait_until(lambda: spark.read.format("delta").load(path).select("producer").distinct().count() == 2, 120)
    for query in producers:
        query.stop()
    drain(lake)
    for query in consumers:
        query.stop()
    _same_judgement(engine, lake)
    stops = [row["flow_stopped_count"] for row in lake.history.read() if row["flow_stopped"]]
    assert stops[0] == 1 and stops == sorted(stops)
    enqueued = spark.read.format("delta").load(path)
    assert enqueued.select("producer").distinct().count() == 2
    for out in ("out1", "out2"):
        delivered = spark.read.format("delta").load(str(tmp_path / out))
        assert delivered.count() == enqueued.count()
        assert delivered.groupBy("producer", "id").count().filter("count > 1").count() == 0


@pytest.mark.parametrize(("settings", "delivered", "counted"), [({"policy": "ring", "maxCount": 3}, [3, 4, 5], 2),
                                                               ({"messageTtl": "3s"}, [6], 5)],
                         ids=["a ring's discards", "expired messages"])
def test_an_engine_consumer_skips_what_its_subscription_was_moved_past_while_it_runs(
        spark: SparkSession, tmp_path: Path, settings: dict, delivered: list[int], counted: int) -> None:
    """While an engine consumer's first batch runs, messages 1-5 come in one commit each and the
    queue moves the subscription past some of them: a ring of 3 discards the oldest, or they
    outlive a TTL of 3 s (message 6, written after, expires them). Its next batch reads those
    commits from Delta's change feed, as the query's offsets say, and delivers only what is after
    the subscription's position then, as the flowqueue source does (a running engine consumer
    delivered every one of them)."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, body STRING", settings=settings)
    sink = QueueSink(path, app_id="p")
    entered, release, consumed = threading.Event(), threading.Event(), []

    def consume(batch: DataFrame, batch_id: int) -> None:
        consumed.extend(sorted(r.id for r in batch.select("id").collect()))
        entered.set()
        release.wait(120)

    spark.conf.set(IO_OPTION, "engine")
    try:
        query = (read_queue(spark, path).writeStream.foreachBatch(consume).trigger(processingTime="500 milliseconds")
                 .option("checkpointLocation", str(tmp_path / "c")).start())
    finally:
        spark.conf.unset(IO_OPTION)
    try:
        assert entered.wait(120) and consumed == []
        for message in range(1, 6):
            sink(spark.createDataFrame([(message, "m")], "id BIGINT, body STRING"), message)
        if "messageTtl" in settings:
            written = queue.ledger.commits(-1, queue.refresh())[-1].timestamp / 1000  # message 5's
            time.sleep(max(0.0, written + 3.1 - time.time()))  # the TTL is the mechanism: let it pass
            sink(spark.createDataFrame([(6, "m")], "id BIGINT, body STRING"), 6)
        release.set()
        wait_until(lambda: consumed[-1:] == delivered[-1:], 60)
        query.processAllAvailable()
    finally:
        release.set()
        query.stop()
    assert consumed == delivered
    sub = queue.subscriptions.get("default")
    assert (sub.discarded_count, sub.expired_count) == ((counted, 0) if "policy" in settings else (0, counted))


def test_a_restarted_engine_consumer_acknowledges_what_its_checkpoint_committed(spark: SparkSession,
                                                                               tmp_path: Path) -> None:
    """An engine consumer's run to completion consumed the 6 messages that stop the queue, but
    its acknowledgement was lost (its process died after the checkpoint's commit, before its
    listener wrote it: here the listener is taken off for that run). Its next run, with nothing
    new in the queue, acknowledges them: the depth that held the producer is 0, and nothing is
    delivered twice. (A restarted query that found nothing new ran no batch, and Spark reports an
    idle query without offsets: the subscription stayed at -1, the producer held for good; the
    kill -9 trial through the engine found it.) A start caught up with the queue records nothing;
    the starts' files are compacted by Delta (auto compaction: at 3 files here, 50 by default),
    and the consumer's stream goes on across the compaction's commit."""
    path, output = str(tmp_path / "q"), str(tmp_path / "out")
    queue = declare(spark, path, "id BIGINT, body STRING", settings={"stopCount": 4, "resumeCount": 2})
    sink = QueueSink(path, options={"onFull": "reject"}, app_id="p")  # stopped by its write, not held after it
    sink(spark.createDataFrame([(i, "m") for i in range(6)], "id BIGINT, body STRING"), 0)
    assert queue.subscriptions.get("default").flow_stopped

    def run() -> None:
        spark.conf.set(IO_OPTION, "engine")
        try:
            frame = read_queue(spark, path)
        finally:
            spark.conf.unset(IO_OPTION)
        (frame.writeStream.format("delta").option("checkpointLocation", str(tmp_path / "c"))
         .trigger(availableNow=True).start(output).awaitTermination())

    acknowledging = acks(spark)
    spark.streams.removeListener(acknowledging)
    try:
        run()
    finally:
        spark.streams.addListener(acknowledging)
    assert queue.subscriptions.get("default").position == -1 and queue.depths()["default"].count == 6
    run()
    wait_until(lambda: queue.depths()["default"].count == 0, 60)
    assert sorted(r.id for r in spark.read.format("delta").load(output).collect()) == list(range(6))

    starts = DeltaTable(queue.consumer_starts.location)
    recorded = starts.version()
    run()  # caught up: nothing a batch could acknowledge
    starts.update_incremental()
    assert starts.version() == recorded and len(starts.file_uris()) == 2
    sink(spark.createDataFrame([(6, "m")], "id BIGINT, body STRING"), 1)
    with with_conf(spark, {"spark.databricks.delta.autoCompact.minNumFiles": "3"}):
        run()
    wait_until(lambda: queue.depths()["default"].count == 0, 60)
    assert sorted(r.id for r in spark.read.format("delta").load(output).collect()) == list(range(7))
    starts.update_incremental()
    assert starts.version() > recorded + 1 and len(starts.file_uris()) == 1, starts.history()


def test_what_the_engine_cannot_do_is_refused_naming_the_setting(spark: SparkSession, tmp_path: Path) -> None:
    """A record-count read limit (Delta's source counts files and bytes) and a purge (Spark SQL
    has no removal that change feeds skip) are refused before anything is read or written."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    spark.conf.set(IO_OPTION, "engine")
    try:
        with pytest.raises(ConfigurationError, match=r"maxRecordsPerTrigger.*maxFilesPerTrigger, maxBytesPerTrigger"):
            read_queue(spark, path, maxRecordsPerTrigger=10)
        with pytest.raises(ConfigurationError, match=r"spark\.flow\.io='engine'.*purge_acknowledged"):
            purge_acknowledged(spark, path)
    finally:
        spark.conf.unset(IO_OPTION)


def test_the_engine_sees_a_column_a_plain_writer_added_between_a_producer_s_appends(spark: SparkSession,
                                                                                  tmp_path: Path) -> None:
    """A queue's schema read through the engine is kept across producers' appends (each batch is
    checked against it) and read again after any other commit: here a plain writer's append that
    adds a column (``mergeSchema``), between two appends a producer's metadata names."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    queue = Queue(path, {IO_OPTION: "engine"})

    def append(frame: DataFrame, **options: str) -> None:
        before = queue.refresh()
        frame.write.format("delta").mode("append").options(**options).save(path)
        wait_until(lambda: queue.refresh() > before, 5, 0.1)  # a write outside the store: seen within FRESH_FOR

    produced = {"userMetadata": json.dumps({METADATA_KEY: {"count": 1, "size": 8, "producer": "spark-flow/p"}})}
    assert queue.schema().names == ["id", "producer"]
    append(spark.createDataFrame([(1, "p")], SCHEMA), **produced)
    assert queue.schema().names == ["id", "producer"]
    append(spark.createDataFrame([(2, "q", "x")], f"{SCHEMA}, extra STRING"), mergeSchema="true")
    append(spark.createDataFrame([(3, "p", None)], f"{SCHEMA}, extra STRING"), **produced)
    assert queue.schema().names == ["id", "producer", "extra"]
    assert '"extra"' in queue.spark_schema().json()


def test_a_state_row_written_through_the_engine_reads_as_deltalake_wrote_it(spark: SparkSession, tmp_path: Path) -> None:
    """A one-row compare-and-set through the engine (an UPDATE with the row's values in the
    statement): a detail with quotes and backslashes and a time to the microsecond land as
    deltalake's MERGE writes them; a row that moved since it was read is left alone; the
    engine's handles on the table in this process see the write at once."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    engine, lake = _both(path)
    other = Queue(path, {IO_OPTION: "engine"})
    before = engine.subscriptions.get("default")
    assert other.subscriptions.get("default") == before  # read: the next look within FRESH_FOR is answered by it
    at = datetime(2026, 12, 7, 12, 30, 1, 123456, tzinfo=UTC)
    detail = "it's C:\\queue\\q at 'depth' 5"
    written = engine.subscriptions.transition(before, True, 1, detail, at)
    assert written is not None and (written.flow_stopped, written.last_transition_detail) == (True, detail)
    assert other.subscriptions.get("default") == written
    assert lake.subscriptions.get("default") == written
    assert engine.subscriptions.transition(before, True, 1, "stale", at) is None, "compare and set"
    lake.subscriptions.transition(written, False, 1, "resumed", at)
    assert engine.subscriptions.get("default") == lake.subscriptions.get("default")
