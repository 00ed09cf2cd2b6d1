"""``spark-flow why``: from a held producer's queue down a chain of queues to the stage that causes
the hold, on real tables (no Spark: queues written by deltalake, transitions recorded by real
gates); the console marks the same stages (test_console)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.homes import chain

SPARK_FLOW = Path(sys.executable).parent / "spark-flow"


@pytest.mark.short_processes
def test_the_command_prints_one_line_per_stage(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    chain(home, ["ingest", "events", "enriched"])
    done = subprocess.run([str(SPARK_FLOW), "--home", home, "why", "ingest"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["ingest", "events", "enriched"]
    assert "root cause: the consumer of subscription default" in lines[2] and "root cause" not in lines[0]
    refused = subprocess.run([str(SPARK_FLOW), "--home", home, "why", "nope"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("spark-flow why: error: queue 'nope' not found") and len(refused.stderr.splitlines()) == 1
