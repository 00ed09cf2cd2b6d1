"""A consumer through the engine (``spark.flow.io`` engine: Delta's source, acknowledged from its
query's progress) run as a scheduled job, as serverless compute runs one: a run to completion,
and the job ends right after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from support.homes import enqueue, make_queue
from support.processes import ROOT, failure

pytestmark = pytest.mark.processes

#: The job as a user writes it: nothing between the run's end and the process's.
SCHEDULED_CONSUMER = """
import sys
sys.path.insert(0, "jobs")
from _common import local_conf
from spark_flow import get_spark, read_queue
from spark_flow.spark.session import exit_process

queue, output, checkpoint = sys.argv[1:]
spark = get_spark({**local_conf(1), "spark.flow.io": "engine"})
(read_queue(spark, queue).writeStream.format("delta").option("checkpointLocation", checkpoint)
 .trigger(availableNow=True).start(output).awaitTermination())
exit_process(0)
"""


def test_a_scheduled_engine_consumer_acknowledges_its_run_before_its_job_ends(tmp_path: Path) -> None:
    """The run's messages delivered and acknowledged: the queue is empty once the job has ended.
    Before, the job closed its listener before a classic session's bus had handed it the run's
    progress: every run delivered and none acknowledged, the depth only grew, and a held
    producer stayed held (the next run, with nothing new to read, acknowledged nothing)."""
    queue = make_queue(tmp_path / "home", "events")
    enqueue(queue, 10)
    output = tmp_path / "delivered"
    run = subprocess.run([sys.executable, "-c", SCHEDULED_CONSUMER, queue.path, str(output), str(tmp_path / "checkpoint")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, failure(run)
    assert DeltaTable(str(output)).to_pyarrow_table().num_rows == 10
    assert queue.depths()["default"].count == 0
