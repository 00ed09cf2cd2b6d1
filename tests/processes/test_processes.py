"""Two producer applications (separate JVMs: the producer job, twice) appending to one queue at
the same time, and sharing a paced one by their weights; and how the suite runs processes (its
xdist groups, a job's timeout)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _common import start_job
from pyspark.sql import SparkSession
from support.processes import spark_submit
from support.streams import drain, start_consumer

from spark_flow.flow.queue import Queue
from spark_flow.spark.declare import declare

pytestmark = pytest.mark.processes


def write_batches(folder: Path, producer: str, batches: int, rows: int) -> None:
    """``batches`` JSON files of ``rows`` messages ``id BIGINT, producer STRING``, ids from 0."""
    folder.mkdir()
    for batch in range(batches):
        lines = (json.dumps({"id": batch * rows + i, "producer": producer}) for i in range(rows))
        (folder / f"part-{batch:04d}.json").write_text("\n".join(lines) + "\n")


def test_two_producer_processes_counts_and_depth_exact(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, producer STRING")
    batches, rows = 3, 40
    procs = []
    for name in ("p1", "p2"):
        write_batches(tmp_path / name, name, batches, rows)
        procs.append(start_job("producer", "--queue", path, "--name", name, "--source", "files",
                               "--path", str(tmp_path / name), "--max-files-per-trigger", "1", "--available-now",
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output[-3000:]
    enqueued = spark.read.format("delta").load(path)
    assert enqueued.count() == 2 * batches * rows
    assert enqueued.groupBy("producer", "id").count().filter("count > 1").count() == 0
    per_producer = {r["producer"]: r["count"] for r in enqueued.groupBy("producer").count().collect()}
    assert per_producer == {"p1": batches * rows, "p2": batches * rows}
    depth = queue.depths()["default"]
    assert depth.count == 2 * batches * rows
    assert depth.size == 2 * batches * rows * (8 + 2)  # a long id and a two-byte producer name


def test_two_producer_processes_share_a_paced_queue_by_their_pacing_weights(spark: SparkSession,
                                                                          tmp_path: Path) -> None:
    """Two producer applications on a paced queue (stop 200 / resume 100: paced writes of at most
    50 messages together), ``spark.flow.pacingWeight=3`` in one's conf: each process learns the
    other's weight from the queue's commits, so once both have written the heavy one writes at
    most 37 messages at a time and the light one 12, and while both have data the heavy one is
    admitted well over what the light one is (a short run's shares are rough: bench/flow_control.py
    measures them over minutes); every message is enqueued once and consumed once."""
    path = str(tmp_path / "q")
    declare(spark, path, "id BIGINT, producer STRING",
            settings={"stopCount": 200, "resumeCount": 100, "pacing": True})
    batches, rows = 4, 60
    output = tmp_path / "out"
    consumer = start_consumer(spark, path, tmp_path / "c", output, maxRecordsPerTrigger=20)  # a pace to share
    try:
        procs = {}
        for name, weight in (("heavy", "3"), ("light", "1")):
            write_batches(tmp_path / name, name, batches, rows)
            procs[name] = start_job("producer", "--queue", path, "--name", name, "--source", "files",
                                    "--path", str(tmp_path / name), "--max-files-per-trigger", "1",
                                    "--available-now", "--checkpoint", str(tmp_path / f"cp_{name}"),
                                    conf={"spark.flow.pacingWeight": weight},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for proc in procs.values():
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out[-3000:]
        queue = Queue(path)
        drain(queue, 120)
    finally:
        consumer.stop()
    commits = [c for c in queue.ledger.commits(-1, queue.refresh()) if c.count]
    app_ids = {name: "spark-flow/" + json.loads((tmp_path / f"cp_{name}" / "metadata").read_text())["id"]
               for name in procs}  # a sink's producer in a streaming query: its query's id
    by_producer = {name: [c for c in commits if c.producer == app_ids[name]] for name in procs}
    assert {name: {c.weight for c in mine} for name, mine in by_producer.items()} == {"heavy": {3}, "light": {1}}
    assert {name: sum(c.count for c in mine) for name, mine in by_producer.items()} == \
        {"heavy": batches * rows, "light": batches * rows}
    both = max(mine[0].version for mine in by_producer.values())  # the later producer's first write
    until = by_producer["heavy"][-1].version  # both have data until the heavy one is done
    for name, most in (("heavy", 37), ("light", 12)):
        later = [c.count for c in by_producer[name] if both < c.version <= until][2:]  # after its next looks
        # the light one may write twice or less before the heavy one is done (a loaded run: r13)
        assert (later or name == "light") and max(later, default=0) <= most, (name, later)
    # a write is paid for at its producer's share after it: the later one's first write counts
    shared = {name: sum(c.count for c in mine if both <= c.version <= until) for name, mine in by_producer.items()}
    assert shared["heavy"] >= 1.5 * shared["light"] > 0, shared  # 2.3 to 4.4 in five runs: equal would be 1
    consumed = spark.read.format("delta").load(str(output))
    assert consumed.count() == 2 * batches * rows == consumed.select("producer", "id").distinct().count()


@pytest.mark.processes
def test_the_processes_tests_are_one_xdist_group_and_the_others_another(request: pytest.FixtureRequest) -> None:
    """Under ``make test`` (``--dist loadgroup``) the ``processes`` tests run one at a time on one
    worker and every other test on the other: each node id carries its group. pytest 9.2 dropped
    the groups without a word (pytest-xdist#1386), and two multi-process cases at once made timed
    waits fail; a test outside both groups could be left to the group's worker, after the group.
    The group's ``mostly_waiting`` tests come first, beside the other worker's tests; the
    ``beside_group`` ones run on the other worker."""
    if not getattr(request.config.option, "loadgroup", False):  # set in xdist's workers
        pytest.skip("runs under --dist loadgroup (make test)")
    groups = {item.nodeid: item.nodeid.rsplit("@", 1)[-1] for item in request.session.items}
    assert set(groups.values()) == {"processes", "session"}, sorted(groups.items())[:5]
    assert groups[request.node.nodeid] == "processes"
    group = [item for item in request.session.items if groups[item.nodeid] == "processes"]
    waiting = [item.get_closest_marker("mostly_waiting") is not None for item in group]
    assert waiting == sorted(waiting, reverse=True), [item.nodeid for item in group][:5]
    beside = [item.nodeid for item in request.session.items if item.get_closest_marker("beside_group")]
    assert beside and all(groups[nodeid] == "session" for nodeid in beside), beside


def test_a_job_not_ended_in_time_is_killed_whole_and_fails_with_what_it_printed(tmp_path: Path) -> None:
    """``spark_submit``'s timeout kills the job's process group (spark-submit's JVM, the Python
    driver, its workers) and fails with the job's output: a controller job on YARN that did not
    end once left only ``TimeoutExpired`` and its Python driver running."""
    queue = str(tmp_path / "q")
    with pytest.raises(AssertionError, match="the producer job did not end within 5 s") as failed:
        spark_submit("producer", "--queue", queue, timeout=5)  # a producer runs until it is stopped
    assert "exit -9" in str(failed.value) and str(failed.value).split("stderr:\n", 1)[1].strip(), failed.value
    left = [proc for proc in Path("/proc").glob("[0-9]*") if queue in _command_line(proc)]
    assert not left, [_command_line(proc) for proc in left]


def _command_line(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # ended meanwhile
        return ""
