"""The producer, controller and consumer jobs (spark-submit, each its own JVM) with the queue,
``spark.flow.home`` and every checkpoint on object storage: the suite's S3 server (moto).
Results are read back with deltalake and the storage options spark-flow derives."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable
from processes import failure, progress, spark_submit
from stores import Store

from spark_flow.admin import FlowAdmin
from spark_flow.queue import Queue

STOP, RESUME, CAPACITY, RATE = 20, 10, 30, 20


@pytest.mark.processes
@pytest.mark.parametrize("store", ["s3", "abfs"], indirect=True)
def test_jobs_with_queue_home_and_checkpoints_on_object_storage(store: Store) -> None:
    """The queue, the home (state tables, status) and every checkpoint on ``store``: a held
    producer restarted from its checkpoint, the controller's status, the consumer; every message
    once, and no secret in any output."""
    path, output, home = store.url("queues", "events"), store.url("consumed"), store.url("home")
    conf = {**store.conf, "spark.flow.home": home}
    # A batch can take seconds (object storage, a busy machine): a rate that fills the queue in
    # the first batch with rows (then held between two chunks of capacity).
    runs = [spark_submit("producer", "--queue", path, "--name", "p1", "--rate", str(3 * RATE), "--capacity",
                         str(CAPACITY), "--trigger", "500ms", "--run-seconds", run_seconds,
                         conf={**conf, "spark.flow.stopCount": str(STOP), "spark.flow.resumeCount": str(RESUME)})
            for run_seconds in ("20", "6")]  # the second run goes on from the first's checkpoint, held
    for producer in runs:
        assert producer.returncode == 0, failure(producer)
        assert f"stopCount={STOP} resumeCount={RESUME}" in producer.stdout, failure(producer)
    lines = [line for run in runs for line in progress(run.stdout, "producer")]
    assert lines, failure(runs[0])
    # Held: the queue went over stop, the producer was flow-stopped, and no line (nor the
    # table) ever shows more than stop + the producer's capacity window.
    assert any(line["flowStopped"] == "true" for line in lines), failure(runs[0])
    assert all(int(line["depth"]) <= STOP + CAPACITY for line in lines), failure(runs[0])
    queue = Queue(path, store.options)
    enqueued = DeltaTable(path, storage_options=store.options or None).to_pyarrow_table(columns=["id", "producer", "body"])
    assert STOP < enqueued.num_rows <= STOP + CAPACITY
    ids = enqueued.column("id").to_pylist()
    assert len(ids) == len(set(ids))  # the restarted producer wrote nothing twice
    assert set(enqueued.column("producer").to_pylist()) == {"p1"}
    assert {len(b) for b in enqueued.column("body").to_pylist()} == {100 - 16 - len("p1")}  # --message-size 100
    default = queue.subscriptions.get("default")
    assert default.flow_stopped and default.flow_stopped_count >= 1
    assert queue.depth().count == enqueued.num_rows

    controller = spark_submit("controller", "--run-seconds", "6", conf=conf)
    assert controller.returncode == 0, failure(controller)
    status = FlowAdmin(home, store.options).status()
    row = status[(status["queue"] == "events") & (status["subscription"] == "default")].iloc[0]
    assert (row["stop_count"], row["resume_count"], row["depth_count"]) == (STOP, RESUME, enqueued.num_rows)
    assert row["flow_stopped"] and row["flow_stopped_count"] == default.flow_stopped_count

    # one consumer run: every JVM on object storage costs about a minute on the 2-core machine
    consumer = spark_submit("consumer", "--queue", path, "--output", output, "--max-records-per-trigger", "10",
                            "--rows-per-second", "50", "--trigger", "500ms", "--until-empty", conf=conf)
    assert consumer.returncode == 0, failure(consumer)
    lines = progress(consumer.stdout, "consumer")
    assert sum(int(line["consumed"]) for line in lines) == enqueued.num_rows, failure(consumer)
    assert lines[-1]["depth"] == "0", failure(consumer)
    consumed = DeltaTable(output, storage_options=store.options or None).to_pyarrow_table(columns=["id"])
    assert sorted(consumed.column("id").to_pylist()) == sorted(ids)  # every message exactly once
    queue.refresh()
    assert queue.depth().count == 0
    for run in [*runs, controller, consumer]:
        for secret in store.secrets:
            assert secret not in run.stdout + run.stderr
