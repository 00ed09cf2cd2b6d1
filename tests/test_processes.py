"""Two producer applications (separate JVMs) appending to one queue at the same time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_flow.queue import declare

pytestmark = pytest.mark.e2e

PRODUCER = Path(__file__).parent / "producer_process.py"


def test_two_producer_processes_counts_and_depth_exact(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, producer STRING")
    batches, rows = 3, 40
    procs = [subprocess.Popen([sys.executable, str(PRODUCER), path, name, str(batches), str(rows)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name in ("p1", "p2")]
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
