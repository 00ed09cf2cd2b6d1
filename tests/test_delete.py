"""Deleting a queue (``spark-flow delete``, ``FlowAdmin.delete_queue``), and what every process of a
queue does once it is gone, however it went: the command, ``DROP TABLE`` of a catalog queue, its
directory removed. The Qpid C++ broker's ``test_blocked_queue_delete``: a producer held by a queue
that is then deleted ends (there within 5 s; here within one ``pollInterval``, short in these
tests, checked as the producer failing long before a generous deadline) with
``QueueNotFoundError`` naming the queue, and nothing is written in the queue's place again."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.fs import DeltaStorageHandler
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.stores import Store
from support.streams import is_held, start_producer, wait_until

from spark_flow.cli import main
from spark_flow.controller.observation import observe
from spark_flow.exceptions import ConfigurationError, QueueNotFoundError
from spark_flow.flow.queue import HOME_PROPERTY, QUEUE_NAME, STATE_LOCATION, Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.declare import declare
from spark_flow.spark.listener import FlowProgressListener
from spark_flow.spark.session import with_conf
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue
from spark_flow.store.access import file_system, remove_location

SCHEMA = "id BIGINT, producer STRING"
FAST = {"capacity": 10, "pollInterval": "200ms"}  # a held producer looks at its queue 5 times a second
DEADLINE = 60  # far beyond one poll interval and a trigger: the bound is the error, not a timing


def holds_anything(location: str, options: Mapping[str, str]) -> bool:
    """Whether anything is at ``location``: a file, or a directory (holding files or not)."""
    from pyarrow.fs import FileType

    files, path = file_system(location, options)
    return bool(files.get_file_info(path).type != FileType.NotFound)


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


def _queue_without_spark(store: Store, name: str) -> Queue:
    """A queue made as ``declare`` makes one, with deltalake (the suite's Spark session has no S3
    file system): three messages, then its properties; its home's state location with a
    subscription, a hold time and a run-time setting; registered."""
    path, home = store.url("queues", name), store.url("home")
    write_deltalake(path, pa.table({"id": [0, 1, 2]}), configuration={"delta.enableChangeDataFeed": "true"},
                    storage_options=store.options or None)
    DeltaTable(path, storage_options=store.options or None).alter.set_table_properties(
        {QUEUE_NAME: name, STATE_LOCATION: store.url("home", name), HOME_PROPERTY: home}, raise_if_not_exists=False)
    queue = Queue(path, store.options)
    queue.subscriptions.create_table()
    queue.subscriptions.create("default", -1)
    queue.hold_times.record("query", 0, 1.5)
    queue.runtime_settings.apply({"stopCount": "9"}, 0)
    FlowAdmin(home, store.options).register(path)
    return queue


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


@pytest.mark.processes
@pytest.mark.parametrize("store", ["local", "s3", "abfs", "gcs"], indirect=True)
def test_the_command_removes_table_state_and_registration(store: Store, tmp_path: Path) -> None:
    """``spark-flow delete`` (no Spark) on local storage, S3, Azure Blob and GCS: an unknown queue
    names the registered ones, ``--if-empty`` refuses and removes nothing; then the table, the
    state location and the registration are gone, and a handle opened before can neither look
    at the queue nor write its state (nothing is made again at its state location)."""
    queue = _queue_without_spark(store, "events")
    if store.kind == "abfs":  # the empty blob Hadoop's ABFS marks a directory with, as Spark leaves it
        DeltaStorageHandler(store.root, store.options).open_output_stream("queues/events").close()
    properties = tmp_path / "storage.conf"
    properties.write_text("".join(f"{key} {value}\n" for key, value in store.conf.items()))

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).parent / "spark-flow"), "--home", store.url("home"),
                               "--properties-file", str(properties), *argv], capture_output=True, text=True,
                              timeout=120, check=False)

    unknown = cli("delete", "payments")
    assert unknown.returncode == 2
    assert "queue 'payments' not found: not registered in " in unknown.stderr and "one of 'events'" in unknown.stderr
    refused = cli("delete", "events", "--if-empty")
    assert refused.returncode == 2 and "it has messages not acknowledged (subscription 'default': 3)" in refused.stderr
    assert holds_anything(queue.path, store.options) and holds_anything(queue.state_location, store.options)

    deleted = cli("delete", "events", "--if-unused")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.startswith(f"queue 'events' deleted: its table at {queue.path}, its state at ")
    assert not holds_anything(queue.path, store.options) and not holds_anything(queue.state_location, store.options)
    assert FlowAdmin(store.url("home"), store.options).queues() == {}
    with pytest.raises(QueueNotFoundError, match=r"queue 'events' not found: its table at .* is gone"):
        queue.refresh()
    with pytest.raises(QueueNotFoundError, match="queue 'events' not found"):
        queue.hold_times.record("query", 1, 2.0)  # what a held producer stopped after the deletion would write
    assert not holds_anything(queue.state_location, store.options)
    for secret in store.secrets:
        assert secret not in deleted.stdout + deleted.stderr + refused.stderr


def test_controller_and_listener_stop_looking_at_a_gone_queue(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The controller's look and the query listener, with their handles open, find the queue gone
    once its directory is removed: the controller observes nothing of it (its keys time out),
    the listener reports nothing of it and logs that once; neither writes in its place."""
    queue = _queue_without_spark(Store("local", str(tmp_path)), "events")
    listener = FlowProgressListener(queues=[queue.path], storage_options={})
    assert len(observe({"events": queue.path}, {})) == 1
    assert listener.in_flight("query", datetime.now(UTC)) == []
    shutil.rmtree(queue.path)
    with caplog.at_level(logging.WARNING):
        assert listener.in_flight("query", datetime.now(UTC)) == []
        assert listener.in_flight("query", datetime.now(UTC)) == []
        assert observe({"events": queue.path}, {}) == []
    gone = [r.getMessage() for r in caplog.records if r.name == "spark_flow.spark.listener"]
    assert len(gone) == 1 and "queue 'events' not found: its table at" in gone[0]
    assert not os.path.exists(queue.path)


def test_removing_files_elsewhere_is_refused_naming_the_schemes() -> None:
    with pytest.raises(ConfigurationError, match=r"location='hdfs://nn/queues/events' is not valid: allowed is a "
                                                 r"local path, s3:// \(s3a://\), abfs:// \(abfss://\), az:// or gs://"):
        remove_location("hdfs://nn/queues/events", {})


def test_a_directory_is_removed_while_a_writer_adds_and_removes_files_in_it(tmp_path: Path) -> None:
    """A deletion races a producer's write job: Hadoop's committer makes and removes its
    ``_temporary`` folder in the queue's table meanwhile. What vanishes or appears under the walk
    is not an error (seen in a full run: ``Cannot delete directory entry '.../_temporary'``), and
    the writer, finding the table gone after its job, removes what it left as the sink does."""
    table = tmp_path / "orders"

    at_work = threading.Event()

    def commit_jobs() -> None:  # Hadoop's FileOutputCommitter: a task's file, moved up, its folder removed
        for job in itertools.count():
            if job == 2:
                at_work.set()
            if not (table / "_delta_log").exists():
                return
            with contextlib.suppress(OSError):  # the deletion removed the folders under it
                attempt = table / f"{job:032x}" / "_temporary" / "0" / "_temporary" / "attempt_0"
                attempt.mkdir(parents=True)
                (attempt / "part-00000.parquet").write_bytes(b"0" * 64)
                (attempt / "part-00000.parquet").rename(attempt.parents[3] / "part-00000.parquet")
                shutil.rmtree(attempt.parents[3] / "_temporary")
            if not (table / "_delta_log").exists():  # its commit finds the table gone
                remove_location(str(table), {})
                return

    for _ in range(20):
        (table / "_delta_log").mkdir(parents=True)
        at_work.clear()
        writer = threading.Thread(target=commit_jobs)
        writer.start()
        try:
            assert at_work.wait(10), "the writer made no job folder"
            remove_location(str(table / "_delta_log"), {})
            remove_location(str(table), {})
        finally:
            writer.join()
        assert not table.exists()
