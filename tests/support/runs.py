"""What a test checks after running the jobs (spark-submit) on a store: a producer held at its
queue's stop and restarted from its checkpoint, the controller's one look applying a command
issued while it was down, a consumer draining the queue in full batches. The object storage
and YARN tests run the same jobs on different stores and check them the same way."""

from __future__ import annotations

import subprocess
from collections.abc import Collection

from deltalake import DeltaTable

from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from support.processes import failure, progress, spark_submit
from support.stores import Store


def check_held_producer(store: Store, path: str, runs: list[subprocess.CompletedProcess[str]], name: str,
                        stop: int, capacity: int) -> tuple[Queue, list[int]]:
    """A producer run, then a second from its checkpoint: both held, no line (nor the table) over
    stop + the producer's capacity window, nothing written twice, 100-byte messages. Returns the
    queue and the ids enqueued."""
    for run in runs:
        assert run.returncode == 0, failure(run)
    lines = [line for run in runs for line in progress(run.stdout, "producer")]
    assert lines, failure(runs[0])
    assert any(line["flowStopped"] == "true" for line in lines), failure(runs[0])
    assert all(int(line["depth"]) <= stop + capacity for line in lines), failure(runs[0])
    enqueued = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id", "producer", "body"])
    assert stop < enqueued.num_rows <= stop + capacity
    ids = enqueued.column("id").to_pylist()
    assert len(ids) == len(set(ids))  # the restarted producer wrote nothing twice
    assert set(enqueued.column("producer").to_pylist()) == {name}
    assert {len(b) for b in enqueued.column("body").to_pylist()} == {100 - 16 - len(name)}  # --message-size 100
    queue = Queue(path, store.options)
    default = queue.subscriptions.get("default")
    assert default.flow_stopped and default.flow_stopped_count >= 1
    assert queue.depth().count == enqueued.num_rows
    return queue, ids


def check_controller(store: Store, home: str, conf: dict[str, str], queue: Queue, stop: int, resume: int,
                     depths: Collection[int], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The controller job (one look: ``--available-now``; ``env`` over this process's
    environment), started after a stop-producers command was issued: its status shows the
    queue's thresholds, a depth among ``depths`` and the flow state as it looked, and the
    command applied once."""
    admin = FlowAdmin(home, store.options)
    command = admin.stop_producers("events")  # issued while no controller runs: applied when it starts
    controller = spark_submit("controller", "--available-now", conf=conf, env=env)
    assert controller.returncode == 0, failure(controller)
    lines = progress(controller.stdout, "controller")
    assert lines and lines[-1]["flowStopped"] == "events/default" and lines[-1]["held"] == "events", failure(controller)
    status = admin.status()
    row = status[(status["queue"] == "events") & (status["subscription"] == "default")].iloc[0]
    assert (row["stop_count"], row["resume_count"]) == (stop, resume) and row["depth_count"] in depths, row
    assert row["flow_stopped"] and row["producers_held"]
    assert queue.settings().producers_stopped, "the command applied: the queue's producers stay stopped"
    assert row["flow_stopped_count"] == queue.subscriptions.get("default").flow_stopped_count
    events = [(r["event"], r["detail"]) for r in admin.history("events") if r["event"] != "sample"]
    assert events.count(("command", f"command {command}: stop-producers")) == 1, events
    return controller


def check_consumer(store: Store, output: str, consumer: subprocess.CompletedProcess[str], queue: Queue,
                   ids: list[int], batch: int) -> None:
    """The consumer drained the queue in batches of ``batch`` messages (all full but the last),
    every message exactly once."""
    assert consumer.returncode == 0, failure(consumer)
    lines = progress(consumer.stdout, "consumer")
    assert [int(line["consumed"]) for line in lines[:-1]] == [batch] * (len(lines) - 1), failure(consumer)
    assert sum(int(line["consumed"]) for line in lines) == len(ids), failure(consumer)
    assert lines[-1]["depth"] == "0", failure(consumer)
    consumed = DeltaTable(output, storage_options=store.options).to_pyarrow_table(columns=["id"]).column("id")
    assert sorted(consumed.to_pylist()) == sorted(ids)  # every message exactly once
    queue.refresh()
    assert queue.depth().count == 0
