"""The notebook runs as a script, and does what it says."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "flow_control_quickstart.py"


def test_notebook_runs_as_a_script(spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOW_NOTEBOOK_DIR", str(tmp_path))
    namespace = runpy.run_path(str(NOTEBOOK), run_name="__main__")
    queue = namespace["queue"]
    assert namespace["delivered"].count() == 600
    assert queue.depths()["default"].count == 0
    assert queue.config().thresholds.resume_count == 400
    assert spark.read.format("delta").load(str(tmp_path / "queues" / "orders")).count() == 600
