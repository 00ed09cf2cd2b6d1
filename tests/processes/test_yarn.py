"""The producer, controller and consumer jobs as YARN applications (client mode) of the suite's
Hadoop mini cluster, with the queue, ``spark.flow.home`` and every checkpoint on its HDFS. One
run proves what the jobs do there: two producer applications on one queue (the line of
docs/deployment.md and a second one), held within stop + their capacities, every message written once; a producer
restarted from its checkpoint; the controller's status and a command queued while it was down;
the consumer's read limits, every message consumed once; the CLI against the ``hdfs://`` home;
``doctor`` on YARN with executors whose Python lacks spark_flow. Without YARN, on the cluster's
HDFS: ``spark-flow delete``, of a queue and of one whose table was removed by hand.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler
from support.docs import BIN, bash_blocks
from support.homes import queue_with_state
from support.processes import ROOT, Terminal, ctrl_c_once_held, failure, in_terminal, progress, spark_submit
from support.runs import check_consumer, check_controller
from support.servers import yarn_applications
from support.stores import Store
from support.streams import wait_until

from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.store.access import location_exists

#: Alone it keeps the 2 cores 56% busy: its time is YARN's heartbeats and container starts.
pytestmark = [pytest.mark.processes, pytest.mark.mostly_waiting]

#: The page's placeholders and what they are on the suite's cluster.
PAGE_ROOT, PAGE_CONF, PAGE_VENV = "hdfs://namenode:8020/flow", "/etc/hadoop/conf", "/opt/venv"
PAGE_PYTHON = f"{PAGE_VENV}/bin/python"
#: The page's sizing flags, as the settings they are.
SIZING = {"--num-executors": "spark.executor.instances", "--executor-cores": "spark.executor.cores",
          "--executor-memory": "spark.executor.memory"}


def yarn_conf() -> dict[str, str]:
    """Client-mode applications as small as the node manager's room for three at once: an
    application master and one executor each. Spark's jars are on the cluster's one node
    already (``local:``), so only the Delta package and PySpark's zips are uploaded. A
    container's environment is YARN's, not the suite's: its JVMs get the suite's options (the
    client compiler only, see ``conftest.JIT``) through the application's settings."""
    options = {f"spark.{env}.JDK_JAVA_OPTIONS": os.environ["JDK_JAVA_OPTIONS"]
               for env in ("yarn.appMasterEnv", "executorEnv") if "JDK_JAVA_OPTIONS" in os.environ}
    return {**options, "spark.master": "yarn", "spark.submit.deployMode": "client",
            "spark.yarn.jars": f"local:{Path(pyspark.__file__).parent / 'jars'}/*",
            "spark.executor.instances": "1", "spark.executor.cores": "1", "spark.executor.memory": "512m",
            "spark.yarn.am.memory": "384m", "spark.pyspark.python": sys.executable,
            # the driver goes on while its executor starts (its first tasks wait for it)
            "spark.scheduler.minRegisteredResourcesRatio": "0",
            # no UI, as every session of the suite: the application master's registration adds
            # its filter to the UI's handlers as they start (a Jetty ConcurrentModificationException
            # killed a job's SparkContext once, 2cad6cc)
            "spark.ui.enabled": "false"}


def test_jobs_on_yarn_with_queue_home_and_checkpoints_on_hdfs(yarn_cluster: tuple[str, Path], tmp_path: Path) -> None:
    """p2 first, slowly (a message a second), declaring the queue; the YARN producer line of docs/deployment.md
    (p1, stop 100 / resume 50; ended by Ctrl-C once the queue holds it) once p2 wrote; p1 again
    from its checkpoint while p2 runs, and the controller meanwhile; the consumer in batches of 50
    (``--max-bytes-per-trigger 5000``, 100-byte messages) and, beside it, the page's doctor line
    with executors whose Python lacks spark_flow; the page's other ``spark-flow`` lines."""
    hdfs, conf_dir = yarn_cluster
    store = Store("hdfs", f"{hdfs}/{tmp_path.name}")
    path, output, home = store.url("queues", "events"), store.url("consumed"), store.url("home")
    stop, resume, capacity = 100, 50, 30
    conf = {**yarn_conf(), "spark.flow.home": home, "spark.flow.stopCount": str(stop),
            "spark.flow.resumeCount": str(resume)}
    env = {"HADOOP_CONF_DIR": str(conf_dir)}
    options = ["--capacity", str(capacity), "--trigger", "500ms"]
    started = time.time() * 1000

    # No producer here runs for a fixed time: on a busy machine YARN can take longer than such a
    # run to give an application its executor, and the run ends before any batch was written.
    # p2 goes first and slowly: a rate source's first batch is empty, and a batch, empty or not,
    # completes only while its queue is not flow-stopped; a p2 started after p1 filled the queue
    # wrote nothing until the end of the wait (CI, 240 s). Its first message means it is past it.
    second = in_terminal("producer", "--queue", path, "--name", "p2", "--rate", "1", *options, conf=conf, env=env)
    second.wait_for(lambda: "p2" in _producers(path, store))
    [export, activate, doctor, producer, status, why] = bash_blocks("docs/deployment.md", "On YARN and HDFS")[0]
    assert export == ["export", f"HADOOP_CONF_DIR={PAGE_CONF}"] and activate == ["source", f"{PAGE_VENV}/bin/activate"]
    words = [word.replace(PAGE_ROOT, store.root).replace(PAGE_PYTHON, sys.executable) for word in producer]
    assert page_sizing(words) == {key: yarn_conf()[key] for key in page_sizing(words)}  # the sizes run here
    words[1:1] = [part for key, value in suite_only(words).items() for part in ("--conf", f"{key}={value}")]
    first = Terminal.start(in_virtualenv([*words, *options]), shell_env(env))
    runs = [ctrl_c_once_held(first, path, store.options)]  # the page's line, ended by Ctrl-C once held
    # p1 again, from its checkpoint, while p2 runs: p2 ends once p1's restart has started its query
    again = in_terminal("producer", "--queue", path, "--name", "p1", "--rate", "40", *options, conf=conf, env=env)
    runs.append(second.ctrl_c_once(lambda: "producer=p1 started:" in again.stdout()))
    # The controller looks while p1 runs again: nobody consumes. Restarted, p1 holds the rest of
    # a batch cut short by its stop, but a fresh batch's first chunk goes in at once (its capacity
    # window: the queue's depth may grow by up to one capacity after this look).
    queue = Queue(path, store.options)
    before = queue.depth().count
    controller = check_controller(store, home, conf, queue, stop, resume, range(before, before + capacity + 1), env=env)
    runs.append(again.ctrl_c())
    queue, ids = check_two_held_producers(store, path, runs, stop, 2 * capacity)

    # The page's doctor line, beside the consumer (the node manager has room for both), with
    # executors whose Python lacks spark_flow.
    # YARN passes the client's PYTHONPATH on to the containers: none, as in a user's shell.
    no_path = {key: value for key, value in shell_env(env).items() if key != "PYTHONPATH"}
    checking = subprocess.Popen(in_virtualenv(doctor_line(doctor, store, python_without_spark_flow(tmp_path))),
                                cwd=ROOT, env=no_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    consumer = spark_submit("consumer", "--queue", path, "--output", output, "--max-records-per-trigger", "100",
                            "--max-bytes-per-trigger", "5000", "--trigger", "500ms", "--until-empty",
                            conf=conf, env=env)
    check_doctor_without_spark_flow(checking, store, tmp_path)
    check_consumer(store, output, consumer, queue, [id for _, id in ids], 50)  # 100-byte messages within 5000 bytes
    consumed = DeltaTable(output, storage_options=store.options).to_pyarrow_table(columns=["producer", "id"])
    assert sorted(zip(consumed.column("producer").to_pylist(), consumed.column("id").to_pylist(), strict=True)) == sorted(ids)

    for command in (status, why):
        shown = subprocess.run([str(BIN / command[0]), *(w.replace(PAGE_ROOT, store.root) for w in command[1:])],
                               cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and "events" in shown.stdout, failure(shown)
    for run in [*runs, controller, consumer]:
        assert "Exception in task" not in run.stderr, failure(run)
    # Six applications of the cluster's resource manager (five jobs and the doctor's session),
    # each ended well (the last one's application master unregisters a moment after its driver ended).
    def applications() -> list[dict[str, object]]:
        return [app for app in yarn_applications(conf_dir) if int(str(app["startedTime"])) >= started]

    wait_until(lambda: all(app["state"] == "FINISHED" for app in applications()), 30, interval=0.5)
    apps = applications()
    assert sorted((app["state"], app["finalStatus"]) for app in apps) == [("FINISHED", "SUCCEEDED")] * 6, apps


def page_sizing(words: list[str]) -> dict[str, str]:
    """The settings a page's spark-submit line sizes its application with: its flags and its
    ``--conf`` of ``spark.yarn.am.memory``."""
    pairs = dict(itertools.pairwise(words))
    sized = {SIZING[flag]: value for flag, value in pairs.items() if flag in SIZING}
    memory = [w.split("=", 1)[1] for w in words if w.startswith("spark.yarn.am.memory=")]
    return {**sized, **({"spark.yarn.am.memory": memory[0]} if memory else {})}


def suite_only(words: list[str]) -> dict[str, str]:
    """What the suite's cluster needs beyond a page's line (``words``): Spark's jars already on
    its node, its JVM options, the driver going on before its executor starts."""
    given = {*page_sizing(words), "spark.master", "spark.pyspark.python"}
    return {key: value for key, value in yarn_conf().items() if key not in given}


def shell_env(env: dict[str, str]) -> dict[str, str]:
    """A user's shell with ``env`` exported: no interpreter named for PySpark but the page's
    (the suite's session sets ``PYSPARK_PYTHON`` in this process, which would win over it)."""
    python = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    return {**{key: value for key, value in os.environ.items() if key not in python}, **env}


def in_virtualenv(words: list[str]) -> list[str]:
    """A page's line as the page runs it: in bash, after its ``source <venv>/bin/activate``."""
    return ["bash", "-c", 'source "$0" && exec "$@"', str(Path(sys.prefix) / "bin" / "activate"), *words]


def python_without_spark_flow(tmp_path: Path) -> Path:
    """A Python with the suite's packages but not spark_flow (installed in the suite's virtualenv
    as a path its own ``.pth`` file adds, which a path added this way does not read)."""
    import site

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=60)
    [packages] = (tmp_path / "bare" / "lib").glob("python3*/site-packages")
    (packages / "suite.pth").write_text(site.getsitepackages()[0] + "\n")
    return tmp_path / "bare" / "bin" / "python"


def doctor_line(doctor: list[str], store: Store, python: Path) -> list[str]:
    """The page's doctor line on the suite's cluster, the executors given ``python``."""
    words = [word.replace(PAGE_ROOT, store.root).replace(PAGE_PYTHON, str(python)) for word in doctor]
    extra = {key: value for key, value in yarn_conf().items() if key not in ("spark.master", "spark.pyspark.python")}
    return [*words, *(part for key, value in extra.items() for part in ("--conf", f"{key}={value}"))]


def check_doctor_without_spark_flow(checking: subprocess.Popen[str], store: Store, tmp_path: Path) -> None:
    """The doctor's run: everything passes but the executors' Python, whose line names the
    module it lacks and the fix; its probe tables are gone from HDFS after."""
    stdout, stderr = checking.communicate(timeout=300)
    result = subprocess.CompletedProcess(checking.args, checking.returncode, stdout, stderr)
    assert checking.returncode == 1, failure(result)
    lines = {line.split(":", 1)[0][6:]: line for line in stdout.splitlines() if line.startswith(("ok  ", "FAIL"))}
    assert [name for name, line in lines.items() if line.startswith("FAIL")] == ["executors' Python",
                                                                                 "executors' deltalake"], failure(result)
    python = tmp_path / "bare" / "bin" / "python"
    assert (f"FAIL  executors' Python: No module named 'spark_flow' in the executors' Python ({python}) -> install "
            "spark-flow (with deltalake and pyarrow) in that Python on every node") in lines["executors' Python"], stdout
    [probe] = re.findall(r"wrote and read (\S+)/driver ", lines["driver's deltalake"])
    assert probe.startswith(store.url("home", "_spark_flow", "doctor"))
    assert not location_exists(probe, store.options)  # its engine and driver tables removed


def test_delete_on_hdfs_and_a_queue_whose_table_was_removed_by_hand(yarn_cluster: tuple[str, Path], tmp_path: Path) -> None:
    """``spark-flow delete`` on the cluster's HDFS (no Spark, no HADOOP_CONF_DIR): a queue's
    table, state and registration; then a queue whose table was removed by hand (as ``hdfs dfs
    -rm -r`` does): what is left goes, and its registration."""
    hdfs, _ = yarn_cluster
    store = Store("hdfs", f"{hdfs}/{tmp_path.name}")
    events, orders = queue_with_state(store, "events"), queue_with_state(store, "orders")
    DeltaStorageHandler(store.root, store.options).delete_dir("queues/orders")  # its files, by hand

    def delete(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "spark-flow"), "--home", store.url("home"), "delete", name], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    for queue in (events, orders):
        deleted = delete(queue.name)
        assert deleted.returncode == 0, failure(deleted)
        assert deleted.stdout.startswith(f"queue {queue.name!r} deleted: its table at {queue.path}, its state at "
                                         f"{queue.state_location}"), failure(deleted)
        assert not location_exists(queue.path, store.options)
        assert not location_exists(queue.state_location, store.options)
    assert FlowAdmin(store.url("home"), store.options).queues() == {}


def _producers(path: str, store: Store) -> set[str]:
    """The producers whose messages the queue at ``path`` holds (none before it is a Delta table)."""
    try:
        table = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["producer"])
    except Exception:  # not yet a Delta table (deltalake's TableNotFoundError) or not reachable yet
        return set()
    return set(table.column("producer").to_pylist())


def check_two_held_producers(store: Store, path: str, runs: list[subprocess.CompletedProcess[str]], stop: int,
                             capacities: int) -> tuple[Queue, list[tuple[str, int]]]:
    """Producer runs of two applications (p1, restarted, and p2): held, no line (nor the table)
    over stop + both capacity windows, every message written once. Returns the queue and the
    messages enqueued (producer, id)."""
    for run in runs:
        assert run.returncode == 0, failure(run)
    lines = [line for run in runs for line in progress(run.stdout, "producer")]
    assert {line["producer"] for line in lines} == {"p1", "p2"}, failure(runs[0])
    assert any(line["flowStopped"] == "true" for line in lines), failure(runs[0])
    assert all(int(line["depth"]) <= stop + capacities for line in lines), failure(runs[0])
    enqueued = DeltaTable(path, storage_options=store.options).to_pyarrow_table(columns=["id", "producer"])
    assert stop < enqueued.num_rows <= stop + capacities
    messages = list(zip(enqueued.column("producer").to_pylist(), enqueued.column("id").to_pylist(), strict=True))
    assert len(messages) == len(set(messages))  # no application's commit overwrote another's; nothing twice
    queue = Queue(path, store.options)
    default = queue.subscriptions.get("default")
    assert default.flow_stopped and default.flow_stopped_count >= 1
    assert queue.depth().count == enqueued.num_rows
    return queue, messages
