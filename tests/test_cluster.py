"""The producer and consumer jobs as applications of a standalone Spark cluster (``spark-submit
--master spark://...``), their queue on the suite's S3 server: the sink's writes and the flowqueue
source's reads run in executors (JVMs of the cluster's worker and their Python workers), not in
the driver's process, and reach storage with the settings the driver's conf gave."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from processes import ROOT, failure, progress, spark_submit
from stores import Store
from test_readme import BIN, bash_blocks

from spark_flow.queue import Queue

STOP, CAPACITY = 500, 300  # STOP: the README's line; a capacity that fills the queue in few S3 commits


def _executor_logs(worker: Path) -> dict[str, str]:
    """Each application's executors' stderr in the worker's directory, by application id."""
    return {app.name: "".join(log.read_text(errors="replace") for log in sorted(app.glob("*/stderr")))
            for app in sorted(worker.glob("app-*"))}


@pytest.mark.processes
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_producer_and_consumer_applications_on_a_standalone_cluster(spark_cluster: tuple[str, Path],
                                                                    store: Store, tmp_path: Path) -> None:
    """The README's producer line (its master, a properties file with the S3 settings, a shorter
    run) held at the queue's stop, then a consumer application draining the queue: every message
    once, the depth never over stop + capacity; each application had its executor on the cluster."""
    master, worker = spark_cluster
    path, output = store.url("queues", "events"), store.url("consumed")
    executors = {"spark.cores.max": "1", "spark.executor.memory": "768m", "spark.pyspark.python": sys.executable}
    before = set(_executor_logs(worker))

    [line] = bash_blocks("Clusters and object storage")[1]
    (tmp_path / "my-s3.conf").write_text("".join(f"{key} {value}\n" for key, value in store.conf.items()))
    words = [word.replace("spark://master:7077", master).replace("s3a://flow/queues/events", path)
             .replace("my-s3.conf", str(tmp_path / "my-s3.conf")) for word in line]
    words[1:1] = [part for key, value in executors.items() for part in ("--conf", f"{key}={value}")]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    producer = subprocess.run([str(BIN / words[0]), *words[1:], "--capacity", str(CAPACITY), "--trigger", "500ms",
                               "--run-seconds", "40"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert producer.returncode == 0, failure(producer)
    lines = progress(producer.stdout, "producer")
    assert any(line["flowStopped"] == "true" for line in lines), failure(producer)
    assert all(int(line["depth"]) <= STOP + CAPACITY for line in lines), failure(producer)
    enqueued = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id"])
    assert STOP < enqueued.num_rows <= STOP + CAPACITY

    consumer = spark_submit("consumer", "--queue", path, "--output", output, "--max-records-per-trigger", "200",
                            "--trigger", "500ms", "--until-empty", conf={**store.conf, "spark.master": master,
                                                                         **executors})
    assert consumer.returncode == 0, failure(consumer)
    consumed = DeltaTable(output, storage_options=store.options).to_pyarrow_table(columns=["id"])
    assert sorted(consumed.column("id").to_pylist()) == sorted(enqueued.column("id").to_pylist())
    assert Queue(path, store.options).depth().count == 0

    # Two applications, each given an executor by the worker (a cluster's driver runs no task: the
    # consumer's flowqueue reads ran in its executor's Python workers), no task failed there.
    apps = {app: log for app, log in _executor_logs(worker).items() if app not in before}
    assert len(apps) == 2, apps.keys()
    for app, log in apps.items():
        assert "Exception in task" not in log and "Traceback" not in log, f"{app}:\n{log[-3000:]}"
    for secret in store.secrets:
        assert all(secret not in run.stdout + run.stderr for run in (producer, consumer))
