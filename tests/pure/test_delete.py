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
import threading
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from support.stores import Store

from spark_flow.controller.observation import observe
from spark_flow.exceptions import ConfigurationError
from spark_flow.flow.queue import HOME_PROPERTY, QUEUE_NAME, STATE_LOCATION, Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.listener import FlowProgressListener
from spark_flow.store.access import remove_location


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
