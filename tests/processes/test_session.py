"""The session helper: Delta works end to end, and an existing session is used as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import ROOT


@pytest.mark.processes
def test_spark_submit_settings_win_over_get_spark_defaults(tmp_path: Path) -> None:
    """Under spark-submit, ``--master`` and ``--conf`` are the session's: get_spark's local
    defaults (``local[*]``, 4 shuffle partitions) fill only what nothing set. A job submitted to a
    cluster must not quietly run in its driver."""
    script = tmp_path / "show.py"
    script.write_text("from spark_flow import get_spark\n"
                      "spark = get_spark({'spark.sql.shuffle.partitions': '5'})\n"
                      "print('conf', spark.sparkContext.master, spark.conf.get('spark.sql.shuffle.partitions'),"
                      " spark.conf.get('spark.app.name'))\n")
    python = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--properties-file", str(ROOT / "conf" / "spark-defaults.conf"),
              "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=3", "--conf", "spark.ui.enabled=false",
              str(script)]
    result = subprocess.run(submit, capture_output=True, text=True, timeout=300, env=python)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "conf local[1] 3 show.py" in result.stdout, result.stdout
