"""The README is a test: its walkthrough's command lines run as written, each job its own
spark-submit with its own conf (paths under a temporary folder instead of /tmp/flow), ended by
Ctrl-C as in a terminal.

Each spark-submit is its own JVM; results are read back with deltalake and the CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from support.docs import BIN, ROOT, bash_blocks
from support.invariants import assert_transitions_follow_thresholds
from support.processes import Terminal, failure, progress
from support.streams import wait_for_looks

from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin


class Walkthrough:
    """The README's terminals: the venv activated, ``SPARK_CONF_DIR`` exported, ``/tmp/flow``
    under ``base``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(BIN.parent),
                    "SPARK_CONF_DIR": str(ROOT / "conf"), "PYSPARK_PYTHON": sys.executable,
                    "PYSPARK_DRIVER_PYTHON": sys.executable}

    def words(self, command: list[str], *more: str) -> list[str]:
        return [w.replace("/tmp/flow", str(self.base)) for w in command] + list(more)

    def start(self, command: list[str], *more: str) -> Terminal:
        return Terminal.start(self.words(command, *more), self.env)

    def run(self, command: list[str], *more: str, timeout: float = 300,
            cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.words(command, *more), cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(1)


def test_readme_walkthrough_as_written(tmp_path: Path) -> None:
    """The controller started with ``spark.flow.home`` only, the producer with stop 500 / resume
    300 in its own conf, then the slow consumer: the status shows 500 / 300 while the producer
    is held, one hold counts one stop however often the controller looks, every recorded stop
    and resume keeps the thresholds, and ``flowStoppedCount`` is the number of stops. The three
    jobs run as written and end by Ctrl-C once the producer went on after its hold: each says so
    in a line and exits 0, no traceback. The last command deletes the queue (no consumer reads
    it any more): its table, state and registration."""
    _setup, [controller], [producer], [consumer], operate = bash_blocks("README.md", "Walkthrough")
    walk = Walkthrough(tmp_path)
    home, path = tmp_path / "home", tmp_path / "queues" / "events"
    jobs = [walk.start(controller), walk.start(producer)]
    try:
        admin = FlowAdmin(str(home))

        def status() -> dict:
            frame = admin.status()
            return frame.to_dict("records")[0] if len(frame) else {}

        wait_for(lambda: status().get("flow_stopped") is True, 240, "the producer held, seen by the controller")
        wait_for_looks(admin, "events", 4, 120)  # one hold, however often the controller looks at it
        held = status()
        assert (held["stop_count"], held["resume_count"]) == (500, 300)
        assert (held["flow_stopped"], held["flow_stopped_count"], held["producers_held"]) == (True, 1, True)
        assert 500 < held["depth_count"] <= 700

        jobs.append(walk.start(consumer))
        made = jobs[1].ctrl_c_once(  # once a batch held by the queue completed: the producer went on
            lambda: any(line["held"] != "0.0s" for line in progress(jobs[1].stdout(), "producer")))
        drained, ended = jobs[2].ctrl_c(), jobs[0].ctrl_c()

        queue = Queue(str(path))
        history, sub = queue.history.read(), queue.subscriptions.get("default")  # before the delete
        export, *commands = operate
        assert walk.words(export) == ["export", f"SPARK_FLOW_HOME={home}"]
        walk.env["SPARK_FLOW_HOME"] = str(home)
        for command in commands:
            result = walk.run(command, timeout=120, cwd=tmp_path)
            assert result.returncode == 0, failure(result)
        assert (tmp_path / "events.png").read_bytes()[:4] == b"\x89PNG"
        assert not path.exists() and not Path(queue.state_location).exists() and admin.queues() == {}
    finally:
        for job in jobs:
            job.ctrl_c(60)

    for result in (made, drained, ended):  # stopped as --run-seconds stops them: a line, no traceback
        assert result.returncode == 0 and "interrupted; stopping the" in result.stdout, failure(result)
        assert "Traceback" not in result.stdout + result.stderr, failure(result)
    # Its batch held again at the Ctrl-C, maybe between two chunks: a stop, not a failure Spark logs.
    assert not re.search(r"Py4JException| ERROR MicroBatchExecution", made.stdout + made.stderr), failure(made)
    produced = progress(made.stdout, "producer")
    assert produced and max(int(line["depth"]) for line in produced) <= 700, failure(made)
    consumed = progress(drained.stdout, "consumer")
    assert consumed, failure(drained)
    stops = [r for r in history if r["flow_stopped"]]
    assert [r["flow_stopped_count"] for r in stops] == list(range(1, sub.flow_stopped_count + 1))
    assert sub.flow_stopped_count == max(int(line["flowStoppedCount"]) for line in produced), failure(made)
    assert_transitions_follow_thresholds(history)
