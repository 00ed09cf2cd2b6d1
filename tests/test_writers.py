"""Several producer applications on one queue on S3, where Delta's commits are safe for one
application only: the second live application is refused before it writes, so no commit is
overwritten and no message lost silently (on the suite's S3 server)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest
from _common import start_job
from deltalake import DeltaTable
from processes import failure, progress, spark_submit
from stores import Store

from spark_flow.exceptions import QueueWriterConflictError
from spark_flow.writers import WriterClaim, needs_claim


def test_which_queues_need_a_claim() -> None:
    assert needs_claim("s3a://b/q", {}) and needs_claim("s3://b/q", {})
    assert needs_claim("s3a://b/q", {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"})
    assert not needs_claim("s3a://b/q", {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore"})
    assert not needs_claim("s3://b/q", {"spark.delta.logStore.class": "io.delta.storage.S3DynamoDBLogStore"})
    for safe in ("/data/q", "file:/data/q", "abfss://c@a.dfs.core.windows.net/q", "gs://b/q"):
        assert not needs_claim(safe, {}), safe


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_claim_refuses_a_live_second_application_and_passes_when_it_is_gone(store: Store) -> None:
    location = store.url("state", "writers")
    first = WriterClaim(location, "events", store.url("events"), "app-1", store.options)
    first.hold()
    second = WriterClaim(location, "events", store.url("events"), "app-2", store.options)
    with pytest.raises(QueueWriterConflictError, match=r"'app-1'.*spark\.delta\.logStore\.s3a\.impl") as raised:
        second.hold()
    assert "events" in str(raised.value)
    # app-1's record as a process on this host that has ended: app-2 takes the queue over at once
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = WriterClaim(location, "events", store.url("events"), "app-1", store.options)
    gone._table.merge(*_as_process(f"{socket.gethostname()}:{dead.pid}"))
    second.hold()
    with pytest.raises(QueueWriterConflictError, match="'app-2'"):
        WriterClaim(location, "events", store.url("events"), "app-3", store.options).hold()


def _as_process(process: str) -> tuple:
    import pyarrow as pa

    return (pa.Table.from_pylist([{"queue": "events", "process": process}]), "t.queue = s.queue",
            lambda m: m.when_matched_update({"process": "s.process"}))


@pytest.mark.e2e
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_second_producer_application_is_refused_before_it_writes(store: Store) -> None:
    path = store.url("queues", "events")
    conf = {**store.conf, "spark.flow.stopCount": "100000"}
    with start_job("producer", "--queue", path, "--name", "first", "--rate", "20", "--trigger", "1s",
                   "--run-seconds", "300", conf=conf, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                   start_new_session=True) as first:
        try:
            deadline = time.monotonic() + 240
            while not _rows(store, path) and time.monotonic() < deadline and first.poll() is None:
                time.sleep(1)
            assert _rows(store, path), "the first application wrote nothing"
            second = spark_submit("producer", "--queue", path, "--name", "second", "--rate", "20",
                                  "--run-seconds", "20", conf=conf)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            out, _ = first.communicate(timeout=120)
    assert second.returncode != 0, failure(second)
    message = second.stdout + second.stderr
    assert "QueueWriterConflictError" in message or "is written by another Spark application" in message, failure(second)
    assert "spark.delta.logStore.s3a.impl" in message and "S3DynamoDBLogStore" in message, failure(second)
    table = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id", "producer"])
    assert set(table.column("producer").to_pylist()) == {"first"}  # the second wrote nothing
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids))
    enqueued = sum(int(line["enqueued"]) for line in progress(out, "producer") if line["enqueued"] != "partial")
    assert enqueued <= len(ids)  # every batch the first application completed is in the queue


def _rows(store: Store, path: str) -> int:
    try:
        return DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id"]).num_rows
    except Exception:  # not created yet
        return 0
