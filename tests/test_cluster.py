"""The producer and consumer jobs as applications of a standalone Spark cluster (``spark-submit
--master spark://...``), their queue on the suite's S3 server: the sink's writes and the flowqueue
source's reads run in executors (JVMs of the cluster's worker and their Python workers), not in
the driver's process, and reach storage with the settings the driver's conf gave."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from processes import failure, progress, spark_submit
from stores import Store

from spark_flow.queue import Queue

STOP, RESUME, CAPACITY = 20, 10, 30


def _executor_logs(worker: Path) -> dict[str, str]:
    """Each application's executor stderr in the worker's directory, by application id."""
    return {app.name: "".join(log.read_text(errors="replace") for log in sorted(app.glob("*/stderr")))
            for app in sorted(worker.glob("app-*"))}


@pytest.mark.e2e
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_producer_and_consumer_applications_on_a_standalone_cluster(spark_cluster: tuple[str, Path],
                                                                    store: Store) -> None:
    """A producer application held at the queue's stop, then a consumer application draining the
    queue: every message once, the depth never over stop + capacity; each application ran its
    tasks in an executor of the cluster (the flowqueue source's reads there too)."""
    master, worker = spark_cluster
    path, output = store.url("queues", "events"), store.url("consumed")
    conf = {**store.conf, "spark.master": master, "spark.cores.max": "1", "spark.executor.memory": "768m",
            "spark.pyspark.python": sys.executable}
    before = set(_executor_logs(worker))
    producer = spark_submit("producer", "--queue", path, "--name", "p1", "--rate", "60", "--capacity",
                            str(CAPACITY), "--trigger", "500ms", "--run-seconds", "20",
                            conf={**conf, "spark.flow.stopCount": str(STOP), "spark.flow.resumeCount": str(RESUME)})
    assert producer.returncode == 0, failure(producer)
    lines = progress(producer.stdout, "producer")
    assert any(line["flowStopped"] == "true" for line in lines), failure(producer)
    assert all(int(line["depth"]) <= STOP + CAPACITY for line in lines), failure(producer)
    enqueued = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id"])
    assert STOP < enqueued.num_rows <= STOP + CAPACITY

    consumer = spark_submit("consumer", "--queue", path, "--output", output, "--max-records-per-trigger", "20",
                            "--trigger", "500ms", "--until-empty", conf=conf)
    assert consumer.returncode == 0, failure(consumer)
    consumed = DeltaTable(output, storage_options=store.options).to_pyarrow_table(columns=["id"])
    assert sorted(consumed.column("id").to_pylist()) == sorted(enqueued.column("id").to_pylist())
    assert Queue(path, store.options).depth().count == 0

    # Two applications, each with an executor of the worker that ran tasks (the consumer's are
    # the flowqueue source's reads: a Python data source reader runs only in an executor's
    # Python worker); neither found a storage setting missing.
    apps = {app: log for app, log in _executor_logs(worker).items() if app not in before}
    assert len(apps) == 2, apps.keys()
    for app, log in apps.items():
        assert "Exception" not in log, f"{app}:\n{log[-3000:]}"
    for secret in store.secrets:
        assert all(secret not in run.stdout + run.stderr for run in (producer, consumer))
