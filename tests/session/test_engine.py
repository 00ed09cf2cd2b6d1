"""The two stores on one queue (docs/design.md 2.10): a queue written through the engine is read
and judged through deltalake alike, and the reverse; what only one store can do says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from support.streams import drain, is_held, start_consumer, start_producer, wait_until

from spark_flow.exceptions import ConfigurationError
from spark_flow.flow.queue import Queue
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.spark.declare import declare, purge_acknowledged
from spark_flow.spark.source import read_queue
from spark_flow.store.engine import EngineTable
from spark_flow.store.lake import LakeTable

SCHEMA = "id BIGINT, producer STRING"


def _both(path: str) -> tuple[Queue, Queue]:
    engine, lake = Queue(path, {IO_OPTION: "engine"}), Queue(path, {IO_OPTION: "deltalake"})
    assert (type(engine._table), type(lake._table)) == (EngineTable, LakeTable)
    return engine, lake


def _same_judgement(engine: Queue, lake: Queue) -> None:
    """Both stores see one depth, one ack position and one flow state."""
    assert engine.depths() == lake.depths()
    assert engine.subscriptions.list() == lake.subscriptions.list()
    assert engine.history.read() == lake.history.read()
    assert engine.settings() == lake.settings()


def test_a_producer_and_a_consumer_in_different_stores_share_one_queue(spark: SparkSession, tmp_path: Path) -> None:
    """An engine producer held at stop + capacity, a deltalake (flowqueue) consumer releasing
    it; then a deltalake producer and an engine (Delta source) consumer: every message once,
    and at each step both stores judge the queue alike."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 40, "resumeCount": 20})
    engine, lake = _both(path)
    producer, _ = start_producer(spark, path, tmp_path / "p1", "engine", 50,
                                 options={"capacity": 10, IO_OPTION: "engine"})
    wait_until(lambda: is_held(producer) and lake.subscriptions.get("default").flow_stopped, 120)
    _same_judgement(engine, lake)
    assert 40 < lake.depths()["default"].count <= 50
    consumer = start_consumer(spark, path, tmp_path / "c1", tmp_path / "out")  # the session's store: auto, deltalake
    wait_until(lambda: not engine.subscriptions.get("default").flow_stopped, 120)
    producer.stop()
    drain(lake)
    consumer.stop()
    _same_judgement(engine, lake)

    spark.conf.set(IO_OPTION, "engine")
    try:
        producer, _ = start_producer(spark, path, tmp_path / "p2", "lake", 50,
                                     options={"capacity": 10, IO_OPTION: "deltalake"})
        wait_until(lambda: is_held(producer) and engine.subscriptions.get("default").flow_stopped, 120)
        consumer = start_consumer(spark, path, tmp_path / "c2", tmp_path / "out")  # the engine's: Delta's source
        wait_until(lambda: not lake.subscriptions.get("default").flow_stopped, 120)
        producer.stop()
        drain(engine)
        consumer.stop()
    finally:
        spark.conf.unset(IO_OPTION)
    _same_judgement(engine, lake)
    stops = [row["flow_stopped_count"] for row in lake.history.read() if row["flow_stopped"]]
    assert stops == [1, 2]
    delivered = spark.read.format("delta").load(str(tmp_path / "out"))
    assert delivered.count() == spark.read.format("delta").load(path).count()
    assert delivered.groupBy("producer", "id").count().filter("count > 1").count() == 0


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
