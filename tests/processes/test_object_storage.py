"""The producer, controller and consumer jobs (spark-submit, each its own JVM) with the queue,
``spark.flow.home`` and every checkpoint on object storage: the suite's S3 server (moto), with
the producer and the consumer as applications of the suite's standalone cluster (the line of
docs/deployment.md), its Azure Blob server (Azurite) and its Google Cloud Storage server (fake-gcs-server, Spark
through Google's GCS connector), with local applications. Results are read back with deltalake
and the storage options spark-flow derives.

Each run starts five applications, a JVM each: one run proves what the jobs do on the stores it
uses (S3; Azure Blob for the queue beside GCS for the rest)
(held within stop + capacity, restarted from the checkpoint, the controller's status and a
command queued while it was down, the consumer's read limits, every message once, no secret in
any output), and on S3 that the sink's writes and the source's reads ran in executors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.docs import BIN, bash_blocks
from support.processes import Terminal, ctrl_c_once_held, failure, in_terminal, spark_submit
from support.runs import check_consumer, check_controller, check_held_producer
from support.stores import Store, object_store

pytestmark = pytest.mark.processes


def _executor_logs(worker: Path) -> dict[str, str]:
    """Each application's executors' stderr in the worker's directory, by application id."""
    return {app.name: "".join(log.read_text(errors="replace") for log in sorted(app.glob("*/stderr")))
            for app in sorted(worker.glob("app-*"))}




@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_jobs_on_a_standalone_cluster_with_queue_home_and_checkpoints_on_s3(
        spark_cluster: tuple[str, Path], store: Store, tmp_path: Path) -> None:
    """The producer line of docs/deployment.md (its master, a properties file with the S3 settings and the
    home), ended by Ctrl-C once held at the queue's stop 500, then restarted from its checkpoint
    in a local application; the controller; a consumer application draining the queue in
    batches of 200 (``--max-bytes-per-trigger`` tighter than ``--max-records-per-trigger``). Each
    cluster application had its executor on the cluster, and no task failed there."""
    master, worker = spark_cluster
    stop, capacity = 500, 300  # stop: the page's line; a capacity that fills the queue in few S3 commits
    path, output, home = store.url("queues", "events"), store.url("consumed"), store.url("home")
    conf = {**store.conf, "spark.flow.home": home}
    executors = {"spark.cores.max": "1", "spark.executor.memory": "768m", "spark.pyspark.python": sys.executable}
    before = set(_executor_logs(worker))

    [line] = bash_blocks("docs/deployment.md", "Clusters and object storage")[1]
    (tmp_path / "my-s3.conf").write_text("".join(f"{key} {value}\n" for key, value in conf.items()))
    words = [word.replace("spark://master:7077", master).replace("s3a://flow/queues/events", path)
             .replace("my-s3.conf", str(tmp_path / "my-s3.conf")) for word in line]
    words[1:1] = [part for key, value in executors.items() for part in ("--conf", f"{key}={value}")]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    options = ["--capacity", str(capacity), "--trigger", "500ms"]
    first = ctrl_c_once_held(Terminal.start([str(BIN / words[0]), *words[1:], *options], env), path, store.options)
    assert first.returncode == 0, failure(first)
    assert f"stopCount={stop} resumeCount={stop}" in first.stdout, failure(first)
    # Goes on from the checkpoint, held, at the page line's rate: Spark's rate source numbers
    # a batch's rows by its seconds times rowsPerSecond, so a restart at another rate repeats ids.
    again = spark_submit("producer", "--queue", path, "--rate", words[words.index("--rate") + 1], *options,
                         "--run-seconds", "4", conf={**conf, "spark.flow.stopCount": str(stop)})
    queue, ids = check_held_producer(store, path, [first, again], "producer", stop, capacity)

    controller = check_controller(store, home, conf, queue, stop, stop, [len(ids)])

    consumer = spark_submit("consumer", "--queue", path, "--output", output, "--max-records-per-trigger", "300",
                            "--max-bytes-per-trigger", "20000", "--trigger", "500ms", "--until-empty",
                            conf={**conf, "spark.master": master, **executors})
    check_consumer(store, output, consumer, queue, ids, 200)  # 100-byte messages within 20000 bytes

    # Two applications, each given an executor by the worker (a cluster's driver runs no task: the
    # consumer's flowqueue reads ran in its executor's Python workers), no task failed there.
    apps = {app: log for app, log in _executor_logs(worker).items() if app not in before}
    assert len(apps) == 2, apps.keys()
    for app, log in apps.items():
        assert "Exception in task" not in log and "Traceback" not in log, f"{app}:\n{log[-3000:]}"
    for run in (first, again, controller, consumer):
        for secret in store.secrets:
            assert secret not in run.stdout + run.stderr


def test_jobs_with_the_queue_on_abfs_and_home_and_checkpoints_on_gcs(tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    """The jobs as local applications with stop 20 / resume 10 in their conf, the queue on Azure
    Blob and the home, the checkpoints and the consumer's output on GCS (one run proves both
    stores: the same jobs reach each, with each one's settings, side by side in one conf): a held
    producer, ended by Ctrl-C, restarted from its checkpoint, the controller, then the consumer in
    batches of 10 (``--max-bytes-per-trigger 1000`` tighter than ``--max-records-per-trigger 20``)."""
    abfs, gcs = (object_store(kind, request, tmp_path) for kind in ("abfs", "gcs"))
    store = Store("abfs+gcs", abfs.root, {**abfs.conf, **gcs.conf})
    stop, resume, capacity, rate = 20, 10, 30, 60
    path, output, home = abfs.url("queues", "events"), gcs.url("consumed"), gcs.url("home")
    conf = {**store.conf, "spark.flow.home": home}  # the jobs' checkpoints: in the queue's state, the home's
    # A batch can take seconds (object storage, a busy machine): a rate that fills the queue in
    # the first batch with rows (then held between two chunks of capacity).
    args = ["--queue", path, "--name", "p1", "--rate", str(rate), "--capacity", str(capacity), "--trigger", "500ms"]
    producer_conf = {**conf, "spark.flow.stopCount": str(stop), "spark.flow.resumeCount": str(resume)}
    first = ctrl_c_once_held(in_terminal("producer", *args, conf=producer_conf), path, store.options)
    runs = [first, spark_submit("producer", *args, "--run-seconds", "4", conf=producer_conf)]  # from its checkpoint, held
    for producer in runs:
        assert f"stopCount={stop} resumeCount={resume}" in producer.stdout, failure(producer)
    queue, ids = check_held_producer(store, path, runs, "p1", stop, capacity)

    controller = check_controller(store, home, conf, queue, stop, resume, [len(ids)])

    consumer = spark_submit("consumer", "--queue", path, "--output", output, "--max-records-per-trigger", "20",
                            "--max-bytes-per-trigger", "1000", "--rows-per-second", "50", "--trigger", "500ms",
                            "--until-empty", conf=conf)
    check_consumer(store, output, consumer, queue, ids, 10)  # 100-byte messages within 1000 bytes
    for run in [*runs, controller, consumer]:
        for secret in store.secrets:
            assert secret not in run.stdout + run.stderr
