"""The notebook runs as a script in a classic session, and does what it says."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from support.notebook import NOTEBOOK, assert_notebook_did_what_it_says


def test_notebook_runs_as_a_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: object) -> None:
    monkeypatch.setenv("FLOW_NOTEBOOK_DIR", str(tmp_path))
    try:
        runpy.run_path(str(NOTEBOOK), run_name="__main__")
    finally:
        spark.conf.unset("spark.flow.home")  # type: ignore[attr-defined]
    assert_notebook_did_what_it_says(tmp_path)
