"""The producer and consumer jobs, run as users run them: spark-submit on the pip-installed Spark,
and the conf files they are run with.

Each job is a process of its own (marked processes); results are read back with deltalake, so the
module needs no SparkSession of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from support.homes import make_queue
from support.processes import ROOT, Terminal, ctrl_c_once_held, failure, in_terminal, progress, spark_submit, warnings

from spark_flow.flow.queue import Queue
from spark_flow.rules.depth import METADATA_KEY

STOP, RESUME, CAPACITY, RATE = 20, 10, 30, 20
JOBS = ROOT / "jobs"
#: The shipped logging configuration, as the README has users export it.
SHIPPED_LOGGING = {"SPARK_CONF_DIR": str(ROOT / "conf")}
#: A log4j entry of Spark's at ERROR (conf/log4j2.properties' pattern, and PySpark's default one).
SPARK_ERROR = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ERROR ", re.MULTILINE)


@pytest.mark.parametrize(("job", "options"), [
    ("producer", ["--queue", "--source", "--rate", "--message-size", "--path", "--format", "--from-queue",
                  "--capacity", "--on-full", "--trigger", "--checkpoint", "--run-seconds", "--name", "--schema",
                  "--available-now", "--msg-publish-rate", "--byte-publish-rate"]),
    ("consumer", ["--queue", "--subscription", "--starting-position", "--max-records-per-trigger",
                  "--max-bytes-per-trigger", "--min-records-per-trigger", "--max-trigger-delay", "--output",
                  "--delay-per-message", "--rows-per-second", "--trigger", "--checkpoint", "--run-seconds",
                  "--until-empty"]),
])
@pytest.mark.short_processes
def test_help_documents_every_option(job: str, options: list[str]) -> None:
    result = subprocess.run([sys.executable, str(JOBS / f"{job}.py"), "--help"], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, failure(result)
    for option in options:
        assert option in result.stdout, option
    assert "examples:" in result.stdout and "spark-submit" in result.stdout


@pytest.mark.short_processes
def test_bad_option_names_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(JOBS / "producer.py"), "--queue", str(tmp_path / "q"),
                             "--rate", "fast"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "--rate" in result.stderr and "'fast'" in result.stderr
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--max-bytes-per-trigger", "0"], "argument --max-bytes-per-trigger: '0' is not > 0"),
    (["--max-bytes-per-trigger", "lots"], "argument --max-bytes-per-trigger: 'lots' is not a size"),
    (["--max-trigger-delay", "5s"], "argument --max-trigger-delay: needs --min-records-per-trigger"),
])
@pytest.mark.short_processes
def test_bad_read_limit_names_it(tmp_path: Path, args: list[str], message: str) -> None:
    """The consumer's read limits are checked before a session starts."""
    result = subprocess.run([sys.executable, str(JOBS / "consumer.py"), "--queue", str(tmp_path / "q"),
                             "--output", str(tmp_path / "out"), *args], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr


@pytest.mark.short_processes
def test_ctrl_c_asks_the_run_loop_to_stop_and_a_second_one_ends_the_job_at_once() -> None:
    """The README's walkthrough, step 5: the first Ctrl-C only asks (the run loop stops the
    query: the walkthrough's jobs show it); a second, while a stop hangs, ends the job with 130."""
    script = ("import os, signal, _common; _common.stop_on_ctrl_c(); os.kill(os.getpid(), signal.SIGINT); "
              "print('asked', _common.INTERRUPTED.is_set(), flush=True); os.kill(os.getpid(), signal.SIGINT); "
              "print('not ended')")
    env = {key: value for key, value in os.environ.items() if key != "PYSPARK_GATEWAY_PORT"}  # no spark-submit JVM
    result = subprocess.run([sys.executable, "-c", script], cwd=JOBS, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert (result.returncode, result.stdout) == (130, "asked True\n"), failure(result)


@pytest.mark.processes
def test_bad_flow_conf_fails_before_anything_is_written(tmp_path: Path) -> None:
    queue = tmp_path / "q"
    result = spark_submit("producer", "--queue", str(queue), "--run-seconds", "5",
                          conf={"spark.flow.stopCount": "abc"})
    assert result.returncode == 2, failure(result)
    # spark-submit passes the Python driver's stderr on to its stdout
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    assert errors == ["error: spark.flow.stopCount='abc' is not valid: allowed is a whole number >= 0"], failure(result)
    assert "Traceback" not in result.stdout + result.stderr
    assert not spark_submit_stack(result), failure(result)
    assert " started" not in result.stdout
    assert not queue.exists()


def spark_submit_stack(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The Java stack lines a run printed: spark-submit's own for a Python program that exited
    with a failure's status (``SparkUserAppException``) among them."""
    return [line for line in (result.stdout + result.stderr).splitlines()
            if line.startswith("\tat ") or "SparkUserAppException" in line]


@pytest.mark.parametrize("stage", ["session", "first batch"])
@pytest.mark.processes
@pytest.mark.beside_group  # a master and one application: beside the group, the run's longest path
def test_ctrl_c_while_the_job_waits_for_room_on_its_cluster_ends_it_quietly(tmp_path: Path, stage: str) -> None:
    """A cluster with no room for the job's executors (a standalone master without a worker):
    Ctrl-C while the job's session starts ends it with one line, its status 130, nothing
    written; while its first batch waits for an executor, it stops the query as at any other
    time. No stack (on main spark-submit added a SparkUserAppException's to the first), no
    error logged (Spark's for the batch's cancelled measurement, on main, to the second)."""
    from support.servers import master_state, spark_standalone_master

    with spark_standalone_master(tmp_path) as (master, ui_port, _env):
        queue = tmp_path / "q"
        job = in_terminal("producer", "--queue", str(queue), "--rate", "10",
                          conf={"spark.master": master}, env=SHIPPED_LOGGING)
        if stage == "session":
            result = job.ctrl_c_once(lambda: bool(master_state(ui_port).get("activeapps")))
        else:
            result = job.ctrl_c_once(lambda: " started: " in job.stdout())
    assert not spark_submit_stack(result), failure(result)
    assert not SPARK_ERROR.search(result.stdout + result.stderr), failure(result)
    lines = result.stdout.splitlines()
    if stage == "session":
        assert result.returncode == 130, failure(result)
        assert len(lines) == 1 and " interrupted before the " in lines[0], failure(result)
        assert not queue.exists()
    else:
        assert result.returncode == 0, failure(result)
        assert " interrupted; stopping the query" in result.stdout and "0 batches completed" in lines[-1], failure(result)


@pytest.mark.processes
def test_producer_is_held_then_the_consumer_drains_the_queue_as_spark_connect_clients(
        tmp_path: Path, connect_session: Callable[[], str], spark_connect_log: Path) -> None:
    """The jobs as Spark Connect clients (``spark-submit --remote``), whose foreachBatch runs on
    the server while the progress lines are printed by the job; the producer ended by Ctrl-C
    once held (the server's query stopped by the client, its lines printed, and no error or
    traceback in the server's log for the batch cut short). (With their own session, the same
    run is the README walkthrough's, and test_object_storage's on S3, and on ABFS beside GCS.)"""
    path, output = tmp_path / "events", tmp_path / "consumed"
    server_log_before = len(spark_connect_log.read_bytes())

    producer = ctrl_c_once_held(in_terminal(
        "producer", "--queue", str(path), "--name", "p1", "--rate", str(RATE), "--capacity", str(CAPACITY),
        "--trigger", "500ms", remote=connect_session(),
        conf={"spark.flow.stopCount": str(STOP), "spark.flow.resumeCount": str(RESUME)}), str(path))
    assert producer.returncode == 0 and "interrupted; stopping the query" in producer.stdout, failure(producer)
    assert not warnings(producer), failure(producer)  # what the user sees: nothing spark-flow could prevent
    assert f"stopCount={STOP} resumeCount={RESUME}" in producer.stdout, failure(producer)
    server_log = spark_connect_log.read_bytes()[server_log_before:].decode(errors="replace")
    # the stop's: no query ended with an error, no Python traceback (the client's closing of its
    # session may race a last RPC of its own, which the server logs as an ERROR: not the stop's)
    assert not re.search(r"Traceback|HoldInterruptedError|terminated with error", server_log), server_log[-5000:]
    lines = progress(producer.stdout, "producer")
    assert lines, failure(producer)
    # Held: the queue went over stop, the producer was flow-stopped, and no line (nor the
    # table) ever shows more than stop + the producer's capacity window.
    assert any(line["flowStopped"] == "true" for line in lines), failure(producer)
    assert all(int(line["depth"]) <= STOP + CAPACITY for line in lines), failure(producer)
    queue = Queue(str(path))
    enqueued = DeltaTable(str(path)).to_pyarrow_table(columns=["id", "producer", "body"])
    assert STOP < enqueued.num_rows <= STOP + CAPACITY
    assert set(enqueued.column("producer").to_pylist()) == {"p1"}
    assert {len(b) for b in enqueued.column("body").to_pylist()} == {100 - 16 - len("p1")}  # --message-size 100
    default = queue.subscriptions.get("default")
    assert default.flow_stopped and default.flow_stopped_count >= 1
    assert queue.depth().count == enqueued.num_rows

    consumer = spark_submit(
        "consumer", "--queue", str(path), "--output", str(output), "--max-records-per-trigger", "20",
        "--max-bytes-per-trigger", "1000", "--rows-per-second", "50", "--trigger", "500ms", "--until-empty",
        remote=connect_session())
    assert consumer.returncode == 0, failure(consumer)
    assert not warnings(consumer), failure(consumer)
    lines = progress(consumer.stdout, "consumer")
    # 100-byte messages within 1000 bytes (the tighter limit): batches of 10, all full but the last
    assert [int(line["consumed"]) for line in lines[:-1]] == [10] * (len(lines) - 1), failure(consumer)
    assert sum(int(line["consumed"]) for line in lines) == enqueued.num_rows, failure(consumer)
    assert lines[-1]["depth"] == "0", failure(consumer)
    consumed = DeltaTable(str(output)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(consumed) == sorted(enqueued.column("id").to_pylist())
    assert len(consumed) == len(set(consumed))  # every message exactly once
    assert queue.depth().count == 0


@pytest.mark.processes
@pytest.mark.beside_group  # one application at a time: beside the group, which is the run's longest path
def test_a_producer_paced_by_its_publish_rate_as_the_readme_runs_it(tmp_path: Path) -> None:
    """The "Publish quotas" line of docs/configuration.md as written (its queue under a temporary folder), ended
    by Ctrl-C once a line shows a wait: the rate source offers 100 messages a second, every
    write is at most one second of the quota of 20, and each batch's line says how long its
    writes waited."""
    from support.docs import BIN, bash_blocks

    [[line]] = bash_blocks("docs/configuration.md", "Publish quotas")
    words = [word.replace("/tmp/flow", str(tmp_path)) for word in line]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    job = Terminal.start([str(BIN / words[0]), *words[1:]], env)

    def throttled(stdout: str) -> bool:
        lines = [line for line in progress(stdout, "producer") if line["enqueued"] != "partial"]
        return any(float(line["throttled"].rstrip("s")) > 0 and line["held"] == "0.0s" for line in lines)

    result = job.ctrl_c_once(lambda: throttled(job.stdout()))
    assert result.returncode == 0, failure(result)
    assert "msgPublishRate=20 bytePublishRate=0" in result.stdout, failure(result)
    assert throttled(result.stdout), failure(result)
    commits = [c.count for c in Queue(str(tmp_path / "queues" / "paced")).ledger.commits(-1) if c.count]
    assert commits and max(commits) <= 20


def quiet(result: subprocess.CompletedProcess[str]) -> list[str]:
    """What a stop or a failed delivery must not print: a traceback, py4j's proxy error, a Spark
    ERROR entry or a JVM stack (spark-submit passes the Python driver's stderr to its stdout)."""
    output = result.stdout + result.stderr
    return [f"{what}: {found}" for what, found in (
        ("traceback", "Traceback" in output), ("py4j", "Py4JException" in output),
        ("Spark ERROR", SPARK_ERROR.findall(output)), ("JVM stack", "\tat " in output)) if found]


@pytest.mark.processes
@pytest.mark.beside_group  # one application at a time: beside the group, which is the run's longest path
def test_ctrl_c_on_a_producer_held_in_mid_batch_ends_it_with_one_line(tmp_path: Path) -> None:
    """A producer whose queue stops it after the first chunk of a batch (stop 5, its window 10,
    no consumer), Ctrl-C'd while held: the batch is cut short (its restart writes the rest), and
    the job says so in its lines, exit 0, with the shipped logging configuration no traceback
    and no Spark ERROR (Spark takes the interrupted hold for the stop it is)."""
    path = tmp_path / "events"
    result = ctrl_c_once_held(in_terminal(
        "producer", "--queue", str(path), "--rate", "100", "--capacity", "10", "--trigger", "500ms",
        conf={"spark.flow.stopCount": "5", "spark.flow.resumeCount": "2"}, env=SHIPPED_LOGGING), str(path))
    assert result.returncode == 0 and "interrupted; stopping the query" in result.stdout, failure(result)
    assert "1 batch cut short by the stop" in result.stdout, failure(result)
    assert not quiet(result), f"{quiet(result)}\n{failure(result)}"
    assert Queue(str(path)).depth().count == 10, "the first chunk only"


def poison_queue(tmp_path: Path, count: int, poison: int) -> Queue:
    """A queue (``maxDeliveries`` 1) with one commit of ``count`` messages, message ``poison``'s
    body 'poison'; made without Spark."""
    queue = make_queue(tmp_path / "home", "events", {"maxDeliveries": 1})
    rows = pa.table({"id": pa.array(range(count), pa.int64()),
                     "body": pa.array(["poison" if i == poison else f"m{i}" for i in range(count)])})
    metadata = json.dumps({METADATA_KEY: {"count": count, "size": count * 10}})
    write_deltalake(queue.path, rows, mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": metadata}))
    return queue


def refusing_output(path: Path) -> None:
    """The consumer's output table, which refuses the poison message (a CHECK constraint that
    Delta enforces in the write's tasks): a consumer that fails on one message."""
    schema = pa.schema([("id", pa.int64()), ("body", pa.string()), ("_position", pa.int64()),
                        ("_enqueue_time", pa.timestamp("us", tz="UTC"))])
    write_deltalake(str(path), schema.empty_table())
    DeltaTable(str(path)).alter.add_constraint({"no_poison": "body <> 'poison'"})


@pytest.mark.processes
@pytest.mark.beside_group  # one application at a time: beside the group, which is the run's longest path
def test_a_consumer_that_fails_on_one_message_logs_one_line_per_failed_delivery(tmp_path: Path) -> None:
    """The consumer job on a queue with one poison message in a batch of 20 (``maxDeliveries``
    1), with the shipped logging configuration: each failed delivery of a part is one WARNING
    line of spark-flow's (queue, subscription, the part's positions, the error), the last one
    moving the message; none of Spark's ERROR entries and stacks. Its progress line counts the
    batch's 20 messages once and its redeliveries apart."""
    queue, output = poison_queue(tmp_path, 20, poison=13), tmp_path / "out"
    refusing_output(output)
    result = spark_submit("consumer", "--queue", queue.path, "--output", str(output), "--trigger", "500ms",
                          "--until-empty", env=SHIPPED_LOGGING)
    assert result.returncode == 0, failure(result)
    output_lines = (result.stdout + result.stderr).splitlines()
    failed = [line for line in output_lines if "WARNING spark_flow.spark.dead_letters" in line]
    # halved: 0..20, 10..20, 10..15, 12..15, 13..15 fail, then message 13 alone, moved
    assert len(failed) == 6, failure(result)
    assert all("queue 'events' subscription 'default': batch " in line and "no_poison" in line
               for line in failed), failure(result)
    assert re.search(r"20 messages (\d+):0\.\.\1:19 failed", failed[0]) and "delivering its halves" in failed[0], failed[0]
    assert re.search(r"message \d+:13 failed", failed[-1]) and "moving it to the dead-letter queue" in failed[-1], \
        failed[-1]
    assert not quiet(result), f"{quiet(result)}\n{failure(result)}"
    [line] = [line for line in progress(result.stdout, "consumer") if line["consumed"] != "0"]
    assert (line["consumed"], line["deadLettered"]) == ("20", "1"), failure(result)
    assert line["redelivered"] == str(10 + 10 + 5 + 5 + 2 + 3 + 1 + 2 + 1 + 1), failure(result)  # the parts' sizes
    assert sorted(DeltaTable(str(output)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == [
        i for i in range(20) if i != 13]
