"""What bench/scrape.py and bench/console.py share: a home of N queues made as the suite makes
them (deltalake and real gates, no Spark; kept in a folder to be used again, it takes minutes at
10,000 queues), and ``spark-flow serve`` run as its users run it from a source tree (this one, or
a commit's from ``git archive``, so two versions are measured side by side in one run), with the
CPU time its process has used; and a controller's scheduled run over a home, whose status table
serve answers with during its first look."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _report import local_conf
from support.homes import enqueue, look_as_a_producer, make_queue

from spark_flow import get_spark
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.records.home import Registry

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["controller_run", "cpu_seconds", "enqueue", "get", "make_home", "served", "source_tree"]


def make_home(base: Path, size: int, *, chain: int = 0) -> tuple[str, list[Queue]]:
    """A home of ``size`` queues of 8 messages each, every tenth held by its depth (stop 5); the
    first ``chain`` of them each written to by the one before (``downstream``). Made once under
    ``base`` and opened again by later runs."""
    home, tables = base / f"home{size}", base / f"q{size}"
    if Registry(str(home)).queues():
        return str(home), [open_queue(path) for path in Registry(str(home)).queues().values()]

    def one(i: int) -> Queue:
        queue = make_queue(home, f"queue{i:05d}", {"stopCount": 5 if i % 10 == 0 else 100}, base=tables, register=False)
        enqueue(queue, 8)
        return queue

    with ThreadPoolExecutor(8) as pool:
        queues = list(pool.map(one, range(size)))
    for upper, lower in itertools.pairwise(queues[:chain]):
        upper.subscriptions.add_downstream("default", [lower.path])
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(look_as_a_producer, [q for i, q in enumerate(queues) if i % 10 == 0]))
    Registry(str(home)).register_all({q.name: q.path for q in queues})
    return str(home), queues


def source_tree(ref: str) -> Path:
    """The package as of commit ``ref`` (``git archive``), in a new temporary folder."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "spark_flow"], check=True, capture_output=True).stdout
    folder = Path(tempfile.mkdtemp(prefix=f"spark-flow-{ref}-"))
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


@contextmanager
def served(tree: Path, home: str) -> Iterator[tuple[int, str]]:
    """``spark-flow --home HOME serve --port 0`` with the package of ``tree``, until the block
    ends; its process id and URL."""
    code = "from spark_flow.cli import main; main()"  # run in ``tree``: ``-c`` puts the folder it runs in first
    process = subprocess.Popen([sys.executable, "-c", code, "--home", home, "serve", "--port", "0"], cwd=tree,
                               env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line.startswith("spark-flow serve: "):
            raise RuntimeError(f"serve from {tree} did not start: {line!r}")
        yield process.pid, line.split()[2]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    """A GET of ``url``: its status and text, waited for as long as it takes (an old serve's
    first look at 10,000 queues takes minutes: that is what is measured)."""
    try:
        with urlopen(Request(url, headers=dict(headers or {})), timeout=900) as response:
            return response.status, response.read().decode()
    except HTTPError as error:
        return error.code, error.read().decode()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, every thread) process ``pid`` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def controller_run(home: str) -> float | None:
    """A controller's scheduled run over ``home`` (``availableNow``, a local session), its status
    table then what serve answers with before its first look ends; the seconds it took, None if
    an earlier run of the bench wrote it."""
    from spark_flow.controller.query import start_controller
    from spark_flow.records.home import control_path
    from spark_flow.store.tables import RecordTable

    if RecordTable(control_path(home, "status")).open() is not None:
        return None
    began = time.perf_counter()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    query = start_controller(spark, home, checkpoint_location=f"{home}-controller", trigger={"availableNow": True})
    query.awaitTermination()
    spark.stop()
    return round(time.perf_counter() - began, 1)
