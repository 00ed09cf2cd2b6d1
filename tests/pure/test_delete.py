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

import pytest
from support.homes import queue_with_state
from support.stores import Store

from spark_flow.controller.observation import observe
from spark_flow.exceptions import ConfigurationError
from spark_flow.spark.listener import FlowProgressListener
from spark_flow.store.access import remove_location


def test_controller_and_listener_stop_looking_at_a_gone_queue(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The controller's look and the query listener, with their handles open, find the queue gone
    once its directory is removed: the controller observes nothing of it (its keys time out),
    the listener reports nothing of it and logs that once; neither writes in its place."""
    queue = queue_with_state(Store("local", str(tmp_path)), "events")
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
    """A storage deltalake reaches but spark-flow removes no files from (lakeFS's): refused, naming
    where it does, hdfs:// with them (hdfs-native's client, no JVM)."""
    with pytest.raises(ConfigurationError, match=r"location='lakefs://repo/main/queues/events' is not valid: allowed is "
                                                 r"a location on storage spark-flow removes files from: a local path, "
                                                 r"s3:// \(s3a://\), abfs:// \(abfss://\), az://, gs:// or hdfs://"):
        remove_location("lakefs://repo/main/queues/events", {})


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
