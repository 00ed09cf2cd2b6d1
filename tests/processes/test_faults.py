"""Faults: kill -9 of producer, consumer and controller processes at random points, and
concurrent writers.

docs/design.md 3.3: a producer or consumer killed with SIGKILL at any point and restarted from its
checkpoint delivers every message exactly once to an idempotent consumer sink, and
flowStoppedCount is not doubled; a controller killed and restarted from its checkpoint keeps
status and flowStoppedCount exact and applies every operator command once. Each process is its
own Spark application (local[1]: the producer job, tests/support/fault_process.py's consumer and
controller), started in its own process group: the kill takes the Python driver, its JVM and
its Python workers at once, as a crashed machine would. Kill points and delays
come from a seeded random generator, so a failing run can be replayed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _common import start_job
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from support.invariants import assert_flow_stopped_count_right

from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.home import control_path
from spark_flow.spark.declare import declare, purge_acknowledged

pytestmark = pytest.mark.timeout(900)

FAULT_PROCESS = Path(__file__).parents[1] / "support" / "fault_process.py"
SCHEMA = "id BIGINT, producer STRING"
SEED = 20261122
#: Longest wait for one step of a trial (JVM starts take long on a loaded 2-core machine).
WAIT = 240


class Child:
    """The producer job or a fault_process.py role, in its own process group, with its output in
    a log file."""

    def __init__(self, role: str, args: list[str], log_dir: Path, children: list[Child]) -> None:
        self.role = role
        self.log = log_dir / f"{role}-{len(children)}.log"
        with open(self.log, "w") as out:
            if role == "producer":
                self.proc = start_job("producer", *args, conf={"spark.flow.pollInterval": "200ms"}, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
            else:
                self.proc = subprocess.Popen([sys.executable, str(FAULT_PROCESS), role, *args], stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        children.append(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (driver, JVM, Python workers) and reap the driver."""
        if self.proc.poll() is None or self._group_alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def tail(self) -> str:
        return f"--- {self.log.name} ---\n" + self.log.read_text()[-2500:]


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in started:
            child.kill()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            logs = "\n".join(c.tail() for c in children[-3:])
            raise AssertionError(f"{what}: not within {timeout}s\n{logs}")
        time.sleep(0.2)


def write_source(folder: Path, files: int, per_file: int) -> int:
    """JSON files of ids 0..files*per_file-1, named so their order is their ids' order."""
    folder.mkdir()
    for f in range(files):
        lines = (json.dumps({"id": f * per_file + i, "producer": "p"}) for i in range(per_file))
        (folder / f"part-{f:04d}.json").write_text("\n".join(lines) + "\n")
    return files * per_file


class Housekeeper:
    """``purge_acknowledged`` then VACUUM (retention 0, removed files only: a full VACUUM at
    retention 0 would also delete the files a producer has written and not yet committed) every
    2 seconds, in a thread; :meth:`stop` does a last round and returns the messages purged."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark, self.path = spark, path
        self.purged, self.rounds, self.errors = 0, 0, []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _round(self) -> None:
        purged = purge_acknowledged(self.spark, self.path)
        if purged:  # a VACUUM is two commits: only when there are files to delete
            DeltaTable(self.path).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
        self.purged += purged
        self.rounds += 1

    def _run(self) -> None:
        while not self._done.wait(2.0):
            try:
                self._round()
            except Exception as error:  # reported by stop()
                self.errors.append(error)

    def stop(self) -> int:
        self._done.set()
        self._thread.join(60)
        self._round()
        assert not self.errors, self.errors
        assert self.rounds > 3, "the housekeeper ran beside the restarts"
        return self.purged


@pytest.mark.processes
@pytest.mark.beside_group
def test_kill_9_producer_and_consumer_at_random_points_delivers_exactly_once(
        spark: SparkSession, tmp_path: Path, children: list[Child]) -> None:
    """Stop 60 / resume 30, producer capacity 25 (chunks of 25 between gate looks), 400 ids in
    batches of 50, consumer admitting 100 per trigger. Kills: producer while held, consumer while
    consuming (twice), producer while writing; each restarted from its checkpoint. From the
    first restart on, a housekeeper purges what was acknowledged and VACUUMs (retention 0) every
    2 seconds beside them. Every id is enqueued once and delivered once; flowStoppedCount matches
    the history; drained, flow is OFF, and every message is purged."""
    rng = random.Random(SEED)
    path, output = str(tmp_path / "q"), str(tmp_path / "out")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 60, "resumeCount": 30})
    total = write_source(tmp_path / "source", files=16, per_file=25)
    stop_marker = tmp_path / "stop-consumer"
    logs = tmp_path / "logs"
    logs.mkdir()
    kills: list[str] = []

    def producer() -> Child:
        """The producer job: the source's JSON files, two a batch, capacity 25; it ends (exit 0)
        once every file is enqueued."""
        return Child("producer", ["--queue", path, "--checkpoint", str(tmp_path / "chk-p"), "--source", "files",
                                  "--path", str(tmp_path / "source"), "--max-files-per-trigger", "2",
                                  "--capacity", "25", "--available-now"], logs, children)

    def consumer() -> Child:
        return Child("consumer", [path, str(tmp_path / "chk-c"), output, str(stop_marker), "100"], logs, children)

    def flow_stopped() -> bool:
        return queue.subscriptions.get("default").flow_stopped

    def delivered() -> int:
        return DeltaTable(output).version() if DeltaTable.is_deltatable(output) else -1

    def kill(child: Child, point: str) -> None:
        assert child.alive(), f"{child.role} ended before its kill ({point})\n{child.tail()}"
        time.sleep(rng.uniform(0.1, 1.5))  # a random point within the phase
        child.kill()
        kills.append(point)

    # 1. no consumer: the producer fills the queue past stop and is held; kill it there.
    p = producer()
    wait_for(lambda: flow_stopped() and queue.depths()["default"].count > 60, WAIT, "producer held", children)
    kill(p, "producer while held")

    # 2. consumer and a restarted producer; kill the consumer while it is consuming.
    housekeeper = Housekeeper(spark, path)
    c, p = consumer(), producer()
    start = delivered()
    wait_for(lambda: delivered() > start, WAIT, "consumer delivering", children)
    kill(c, "consumer while consuming")

    # 3. restarted consumer; kill the producer while it is writing (just after a new commit).
    c = consumer()
    version = queue.refresh()
    wait_for(lambda: queue.refresh() > version, WAIT, "producer writing", children)
    kill(p, "producer while writing")

    # 4. restarted producer; kill the consumer while consuming. With no consumer the producer is
    # held again; then a last consumer drains the queue and the producer finishes its source.
    p = producer()
    start = delivered()
    wait_for(lambda: delivered() > start, WAIT, "consumer delivering", children)
    kill(c, "consumer while consuming")
    wait_for(lambda: flow_stopped() or not p.alive(), WAIT, "producer held again (or finished)", children)
    held_twice = flow_stopped() and p.alive()
    c = consumer()
    wait_for(lambda: not p.alive(), WAIT, "producer finished", children)
    assert p.proc.returncode == 0, p.tail()
    wait_for(lambda: queue.depths()["default"].count == 0, WAIT, "queue drained", children)
    stop_marker.touch()
    wait_for(lambda: not c.alive(), WAIT, "consumer stopped", children)
    assert c.proc.returncode == 0, c.tail()
    purged = housekeeper.stop()

    assert kills == ["producer while held", "consumer while consuming", "producer while writing",
                     "consumer while consuming"]
    latest = queue.refresh()
    assert sum(c.count for c in Queue(path).ledger.commits(-1, latest)) == total, "every id enqueued exactly once"
    assert purged == total and DeltaTable(path).to_pyarrow_table().num_rows == 0, "all purged in the end"
    out = DeltaTable(output).to_pyarrow_table().column("id").to_pylist()
    duplicates = sorted(i for i, n in Counter(out).items() if n > 1)
    missing = sorted(set(range(total)) - set(out))
    assert not duplicates and not missing, f"duplicates {duplicates[:20]}, missing {missing[:20]}"
    assert len(out) == total

    assert held_twice, "the producer was held in phases 1 and 4"
    assert assert_flow_stopped_count_right(queue) >= 1
    sub = queue.subscriptions.get("default")
    assert not sub.flow_stopped, "drained, the subscription ends flow-OFF"
    last_message = max(c.version for c in queue.ledger.commits(-1, queue.refresh()) if c.count)
    assert sub.position >= last_message, "acknowledged up to the last message (purges and VACUUMs follow it)"
    assert max(r["depth_count"] for r in queue.history.read() if r["flow_stopped"]) <= 60 + 25 + 25, (
        "depth bound: stop + capacity (+ one capacity for the replay of a killed producer's batch)")


@pytest.mark.processes
def test_kill_9_controller_at_random_points_keeps_status_and_count_exact(
        spark: SparkSession, tmp_path: Path, children: list[Child]) -> None:
    """A controller process (stop 5 / resume 2, plain appends: no gate, so only the controller
    steps the flow machine) is killed three times: just after the depth passes stop, while the
    queue fills again, and just after an operator command. Each restart from the checkpoint
    finds the flow state where it was; at the end the status, the subscription and both
    histories show exactly two stops and two resumes, and the command was applied once."""
    rng = random.Random(SEED + 1)
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    admin = FlowAdmin(home)
    admin.register(path)
    logs = tmp_path / "logs"
    logs.mkdir()

    def controller() -> Child:
        return Child("controller", [home, str(tmp_path / "chk")], logs, children)

    def status() -> dict[str, object]:
        rows = admin.status("q").to_dict("records")
        return rows[0] if rows else {}

    def shows(**expected: object) -> Callable[[], bool]:
        return lambda: all(status().get(k) == v for k, v in expected.items())

    def append(first: int) -> None:
        spark.range(first, first + 10).selectExpr("id", "'p' AS producer").write.format("delta").mode(
            "append").save(path)

    def applied() -> list[str]:
        """The commands the controller's history records as applied, in order."""
        history = DeltaTable(control_path(home, "history")).to_pyarrow_table().to_pylist()
        return [r["detail"].split(":")[1].strip() for r in sorted(history, key=lambda r: r["time"])
                if r["event"].startswith("command")]

    def kill_soon(child: Child) -> None:
        assert child.alive(), child.tail()
        time.sleep(rng.uniform(0.0, 1.2))  # a random point of the controller's next batches
        child.kill()

    c = controller()
    wait_for(shows(flow_stopped=False, flow_stopped_count=0), WAIT, "controller watching", children)
    append(0)  # depth 10 > stop 5
    kill_soon(c)
    c = controller()
    wait_for(shows(flow_stopped=True, flow_stopped_count=1), WAIT, "first stop", children)
    queue.acknowledge("default", queue.refresh())
    wait_for(shows(flow_stopped=False, flow_stopped_count=1), WAIT, "first resume", children)

    append(10)
    kill_soon(c)  # before or after it saw the second stop
    queue.acknowledge("default", queue.refresh() - 1)  # depth 0, then 10 again while it is down
    append(20)
    c = controller()
    wait_for(shows(flow_stopped=True, flow_stopped_count=2), WAIT, "second stop", children)

    admin.stop_producers("q")
    kill_soon(c)  # before, while or after it applies the command
    c = controller()
    # producers_stopped, not producers_held: the queue is flow-stopped already, so the held row
    # the killed controller left would do. A batch looks at the queues before it applies its
    # commands, so a start-producers issued before the stop is applied can land in the next batch,
    # whose row still shows the stop: the last row (CI: producers_held True at the end).
    wait_for(shows(producers_stopped=True), WAIT, "manual stop applied", children)
    admin.start_producers("q")
    queue.acknowledge("default", queue.refresh())
    wait_for(lambda: shows(flow_stopped=False, producers_stopped=False, depth_count=0)() and len(applied()) == 2,
             WAIT, "resumed, drained and recorded", children)
    c.kill()

    final = status()
    assert (final["flow_stopped"], final["flow_stopped_count"], final["producers_held"]) == (False, 2, False)
    sub = queue.subscriptions.get("default")
    assert (sub.flow_stopped, sub.flow_stopped_count) == (False, 2)
    transitions = [(r["event"], r["flow_stopped_count"]) for r in admin.history("q") if r["event"] in
                   ("stopped", "resumed")]
    assert transitions == [("stopped", 1), ("resumed", 1), ("stopped", 2), ("resumed", 2)]
    assert [r["flow_stopped_count"] for r in queue.history.read()] == [1, 1, 2, 2]
    assert applied() == ["stop-producers", "start-producers"], "each command applied (and recorded) once"
    assert queue.runtime_settings.current() == {"producersStopped": "false"}
