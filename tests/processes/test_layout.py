"""The package's layout: its layers and their one-way imports are import-linter's contracts in
pyproject.toml (``make lint``); here, that they do break on a wrong-way import, and that no
module grows past 400 lines. Reads the source."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spark_flow"


@pytest.mark.short_processes
def test_the_contracts_break_on_a_wrong_way_import(tmp_path: Path) -> None:
    """A pure rule that imports the flow above it, and one outside the store that imports
    deltalake: lint-imports fails naming both, where the package as it is passes."""
    shutil.copytree(PACKAGE, tmp_path / "spark_flow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)

    def lint() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=tmp_path,
                              env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True,
                              text=True, timeout=120)

    assert lint().returncode == 0
    state = tmp_path / "spark_flow" / "rules" / "flow_state.py"
    state.write_text(state.read_text() + "\nfrom spark_flow.flow.gate import Gate  # noqa\n")
    view = tmp_path / "spark_flow" / "ops" / "view.py"
    view.write_text(view.read_text() + "\nimport deltalake  # noqa\n")
    broken = lint()
    assert broken.returncode == 1
    assert "spark_flow.rules.flow_state -> spark_flow.flow.gate" in broken.stdout
    assert "spark_flow.ops.view -> deltalake" in broken.stdout
