"""The notebook runs as a Spark Connect client (Databricks serverless and standard access mode)
against a local server, and does what it says."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.notebook import NOTEBOOK, assert_notebook_did_what_it_says


@pytest.mark.processes
def test_notebook_runs_under_spark_connect(tmp_path: Path, connect_session: Callable[[], str]) -> None:
    """The notebook as a Connect client: its queries, foreachBatch sinks and data sources run on
    the server, spark_flow's own reads (FlowAdmin, depths) in the client."""
    env = {**os.environ, "SPARK_REMOTE": connect_session(), "FLOW_NOTEBOOK_DIR": str(tmp_path)}
    run = ("import runpy, sys; from spark_flow.spark.session import exit_process; "
           f"runpy.run_path({str(NOTEBOOK)!r}, run_name='__main__'); exit_process(0)")
    result = subprocess.run([sys.executable, "-c", run], env=env, capture_output=True, text=True, timeout=540,
                            check=False)
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"
    assert "ok: the producer is held (flowStopped)" in result.stdout
    assert_notebook_did_what_it_says(tmp_path)
