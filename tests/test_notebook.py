"""The notebook runs as a script, and does what it says."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "flow_control_quickstart.py"

pytestmark = pytest.mark.e2e


def test_notebook_runs_as_a_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: object) -> None:
    monkeypatch.setenv("FLOW_NOTEBOOK_DIR", str(tmp_path))
    try:
        namespace = runpy.run_path(str(NOTEBOOK), run_name="__main__")
    finally:
        spark.conf.unset("spark.flow.home")  # type: ignore[attr-defined]
    produced, delivered = namespace["produced"], namespace["delivered"]
    assert delivered.count() == produced.count() == delivered.select("order_id").distinct().count() > 150
    final = namespace["final"]
    assert final["flow_stopped_count"] >= 1 and final["stop_count"] == 400 and final["depth_count"] == 0
    assert not final["producers_stopped"] and not final["flow_stopped"]
    commands = [r["detail"] for r in namespace["admin"].history("orders") if r["event"] == "command"]
    assert [c.split(": ")[1].split()[0] for c in commands] == ["set", "stop-producers", "start-producers"]
    assert namespace["chart"].read_bytes()[:4] == b"\x89PNG"
