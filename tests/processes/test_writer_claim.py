"""Several producer applications on one queue on S3, where Delta's commits are safe for one
application only: the second live application is refused before it writes, so no commit is
overwritten and no message lost silently (on the suite's S3 server)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from _common import start_job
from deltalake import DeltaTable
from support.processes import failure, progress, spark_submit
from support.stores import Store

from spark_flow.exceptions import QueueWriterConflictError
from spark_flow.records.writer_claim import WriterClaim
from spark_flow.store.table import Merge


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_claim_refuses_a_live_second_application_and_passes_when_it_is_gone(store: Store) -> None:
    location = store.url("state", "writers")
    first = WriterClaim(location, "events", store.url("events"), "app-1", store.options)
    first.renew()
    second = WriterClaim(location, "events", store.url("events"), "app-2", store.options)
    with pytest.raises(QueueWriterConflictError, match=r"'app-1'.*spark\.delta\.logStore\.s3a\.impl") as raised:
        second.renew()
    assert "events" in str(raised.value)
    # app-1's record as a process on this host that has ended: app-2 takes the queue over at once
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = WriterClaim(location, "events", store.url("events"), "app-1", store.options)
    gone._table.merge(*_as_process(f"{socket.gethostname()}:{dead.pid}"))
    second.renew()
    with pytest.raises(QueueWriterConflictError, match="'app-2'"):
        WriterClaim(location, "events", store.url("events"), "app-3", store.options).renew()


def _as_process(process: str) -> tuple:
    import pyarrow as pa

    return (pa.Table.from_pylist([{"queue": "events", "process": process}]),
            Merge("t.queue = s.queue", update={"process": "s.process"}))


@pytest.mark.processes
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_second_producer_application_is_refused_before_it_writes(store: Store, tmp_path: Path) -> None:
    """Two producer applications on one S3 queue: the second starts once the first has declared
    the queue, and whichever claims it second is refused at its first batch, before it writes;
    the queue holds the other's messages only, each once, every batch it completed."""
    path = store.url("queues", "events")
    conf = {**store.conf, "spark.flow.stopCount": "100000"}
    errors = tmp_path / "first.err"
    with errors.open("w") as err, start_job(
            "producer", "--queue", path, "--name", "first", "--rate", "20", "--trigger", "1s", "--run-seconds", "300",
            conf=conf, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True) as first:
        try:
            deadline = time.monotonic() + 240
            while not DeltaTable.is_deltatable(path, storage_options=store.options) and time.monotonic() < deadline:
                assert first.poll() is None, errors.read_text()[-3000:]
                time.sleep(1)
            second = spark_submit("producer", "--queue", path, "--name", "second", "--rate", "20",
                                  "--trigger", "1s", "--run-seconds", "20", conf=conf)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            out, _ = first.communicate(timeout=120)
    refused = {"second": second.stdout + second.stderr, "first": out + errors.read_text()}
    loser = "second" if second.returncode != 0 else "first"
    winner = "first" if loser == "second" else "second"
    message = refused[loser]
    assert "is written by another Spark application" in message, failure(second)
    assert "spark.delta.logStore.s3a.impl" in message and "S3DynamoDBLogStore" in message, failure(second)
    assert "is written by another Spark application" not in refused[winner]
    table = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id", "producer"])
    # The refused one wrote nothing (the winner may have been killed before its first rows).
    assert set(table.column("producer").to_pylist()) <= {winner}
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids))
    lines = progress(out if winner == "first" else second.stdout, "producer")
    assert sum(int(line["enqueued"]) for line in lines if line["enqueued"] != "partial") <= len(ids)
