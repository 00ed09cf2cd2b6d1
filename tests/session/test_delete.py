"""Deleting a queue (``spark-flow delete``, ``FlowAdmin.delete_queue``), and what every process of a
queue does once it is gone, however it went: the command, ``DROP TABLE`` of a catalog queue, its
directory removed. The Qpid C++ broker's ``test_blocked_queue_delete``: a producer held by a queue
that is then deleted ends (there within 5 s; here within one ``pollInterval``, short in these
tests, checked as the producer failing long before a generous deadline) with
``QueueNotFoundError`` naming the queue, and nothing is written in the queue's place again."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.streams import is_held, start_producer, wait_until

from spark_flow.cli import main
from spark_flow.exceptions import QueueNotFoundError
from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.declare import declare
from spark_flow.spark.session import with_conf
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue

SCHEMA = "id BIGINT, producer STRING"
FAST = {"capacity": 10, "pollInterval": "200ms"}  # a held producer looks at its queue 5 times a second
DEADLINE = 60  # far beyond one poll interval and a trigger: the bound is the error, not a timing


def _ends_with_queue_gone(query: StreamingQuery, name: str) -> None:
    """``query`` fails (long before the deadline) with QueueNotFoundError naming queue ``name``."""
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(DEADLINE)
    assert "QueueNotFoundError" in str(failed.value) and f"queue {name!r} not found" in str(failed.value)
    query.stop()


def _held(spark: SparkSession, queue: str, handle: Queue, checkpoint: Path) -> StreamingQuery:
    """A producer of ``queue`` (stop 5), held: its batch is written and does not complete."""
    producer, _ = start_producer(spark, queue, checkpoint, "p", 50, options=FAST)
    wait_until(lambda: is_held(producer) and handle.subscriptions.get("default").flow_stopped, DEADLINE)
    return producer


@pytest.fixture
def catalog(spark: SparkSession, tmp_path: Path) -> Iterator[str]:
    """A database in ``tmp_path``, current while the test runs: its managed tables land there."""
    database, current = "spark_flow_test_delete", spark.catalog.currentDatabase()
    spark.sql(f"CREATE DATABASE {database} LOCATION '{tmp_path / 'warehouse'}'")
    spark.catalog.setCurrentDatabase(database)
    yield database
    spark.catalog.setCurrentDatabase(current)
    spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


@pytest.mark.parametrize("how", ["command", "drop-table", "directory"])
def test_a_held_producer_ends_when_its_queue_is_deleted(spark: SparkSession, tmp_path: Path, how: str,
                                                        request: pytest.FixtureRequest,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Qpid's test_blocked_queue_delete, the queue deleted three ways: the held producer fails
    with QueueNotFoundError naming the queue, and after its stop nothing is at the queue's
    location nor its state location (no hold time recorded, no state table made again). The
    command refuses a catalog queue, saying how Spark drops it; once dropped (or its directory
    removed), the command removes the state its home keeps and its registration."""
    home = str(tmp_path / "home")
    if how == "drop-table":
        request.getfixturevalue("catalog")
        queue = "events"
    else:
        queue = str(tmp_path / "queues" / "events")
    with with_conf(spark, {"spark.flow.home": home}):
        handle = declare(spark, queue, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    producer = _held(spark, queue, handle, tmp_path / "producer")
    if how == "command":
        assert main(["--home", home, "delete", "events"]) == 0
    elif how == "drop-table":
        capsys.readouterr()
        assert main(["--home", home, "delete", "events"]) == 2  # only Spark drops it: nothing removed
        assert f"DROP TABLE spark_catalog.{request.getfixturevalue('catalog')}.events" in capsys.readouterr().err
        assert handle.owner.exists() and is_held(producer)
        spark.sql("DROP TABLE events")
    else:
        shutil.rmtree(handle.path)
    _ends_with_queue_gone(producer, "events")
    assert not os.path.exists(handle.path)
    if how != "command":  # the state its home keeps, left by Spark or rm: the command removes it
        assert os.path.exists(handle.state_location) and list(FlowAdmin(home).queues()) == ["events"]
        assert main(["--home", home, "delete", "events"]) == 0
    assert not os.path.exists(handle.state_location)
    assert FlowAdmin(home).queues() == {}


def test_consumers_and_producers_end_when_their_queue_is_deleted_and_guards_refuse(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pipeline stage whose downstream queue is deleted fails naming that queue; a consumer and
    a producer (not held) of a deleted queue fail naming it. ``--if-unused`` refuses while a
    consumer reads, ``--if-empty`` while a subscription has messages, naming why; a refused
    deletion removes nothing."""
    home = str(tmp_path / "home")
    orders, enriched = str(tmp_path / "orders"), str(tmp_path / "enriched")
    with with_conf(spark, {"spark.flow.home": home}):
        queues = [declare(spark, path, SCHEMA) for path in (orders, enriched)]
    for path in (orders, enriched):
        QueueSink(path, app_id="seed")(spark.range(3).selectExpr("id", "'seed' AS producer"), 0)

    def consume(name: str, **options: str) -> StreamingQuery:
        return (read_queue(spark, orders, **options).writeStream.format("delta").trigger(processingTime="200 milliseconds")
                .option("checkpointLocation", str(tmp_path / name / "chk")).start(str(tmp_path / name / "out")))

    stage = consume("stage", downstream=enriched)
    wait_until(lambda: queues[0].depths()["default"].count == 0, DEADLINE)
    capsys.readouterr()
    assert main(["--home", home, "delete", "orders", "--if-unused"]) == 2
    assert main(["--home", home, "delete", "enriched", "--if-empty"]) == 2
    refusals = capsys.readouterr().err.splitlines()
    assert refusals[0].startswith("spark-flow delete: error: queue 'orders' was not deleted: it has consumers "
                                  "(subscription 'default' by reader ")
    assert "queue 'enriched' was not deleted: it has messages not acknowledged (subscription 'default': 3)" in refusals[1]
    assert all(queue.owner.exists() and os.path.exists(queue.state_location) for queue in queues)
    assert sorted(FlowAdmin(home).queues()) == ["enriched", "orders"]

    assert main(["--home", home, "delete", "enriched", "--if-unused"]) == 0  # nobody reads it
    _ends_with_queue_gone(stage, "enriched")

    producer, _ = start_producer(spark, orders, tmp_path / "producer", "p", 20, options=FAST)
    consumer = consume("consumer")
    wait_until(lambda: consumer.lastProgress is not None and producer.lastProgress is not None, DEADLINE)
    assert main(["--home", home, "delete", "orders"]) == 0
    _ends_with_queue_gone(consumer, "orders")
    _ends_with_queue_gone(producer, "orders")
    for queue in queues:
        assert not os.path.exists(queue.path) and not os.path.exists(queue.state_location)


def test_a_batch_its_queue_deletion_lands_in_fails_naming_the_queue(spark: SparkSession, tmp_path: Path) -> None:
    """A deletion can land between any two looks of a producer's batch. Here it lands while the
    batch is measured, after the queue was found there (the batch's rows remove the queue as they
    are computed): the batch fails naming the queue, not with what the next look at the removed
    log says (seen in a full run: deltalake's ``File not found: .../_delta_log/...json``)."""
    from pyspark.sql import functions as F

    path = str(tmp_path / "orders")
    declare(spark, path, SCHEMA)
    sink = QueueSink(path, app_id="p")
    sink(spark.range(3).selectExpr("id", "'p' AS producer"), 0)

    @F.udf("string")
    def removing_the_queue(producer):  # no hints: PySpark would warn it cannot infer an eval type from them
        shutil.rmtree(path, ignore_errors=True)
        return producer

    rows = spark.range(3, 6).selectExpr("id", "'p' AS producer").withColumn("producer", removing_the_queue("producer"))
    with pytest.raises(QueueNotFoundError, match=r"queue 'orders' not found: its table at .* is gone"):
        sink(rows, 1)
