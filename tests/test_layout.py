"""The package's layout as the README's Layout table states it: every module in a row, each
importing only modules of its own row or above (so there is no import cycle), none over 400
lines. Reads the source; starts nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "spark_flow"


def layout_rows() -> dict[str, int]:
    """Each module of the README's Layout table, by its row (0: the bottom)."""
    section = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = [re.findall(r"`(?:spark_flow/)?(\w+)\.py`", line.split("|")[1])
            for line in section.splitlines() if line.startswith("| `spark_flow/")]
    return {module: row for row, modules in enumerate(rows) for module in modules}


def imported(module: str) -> set[str]:
    """The spark_flow modules ``module`` imports, at its top or inside a function."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    return {node.module.split(".")[1] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spark_flow.")}


def modules() -> list[str]:
    return sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")


def test_every_module_has_its_row_in_the_readme() -> None:
    rows = layout_rows()
    assert [m for m in modules() if m not in rows] == []
    assert [m for m in rows if m not in modules()] == []


def test_imports_flow_one_way() -> None:
    rows = layout_rows()
    upward = [f"{module} imports {dep}" for module in modules() for dep in imported(module) if rows[dep] > rows[module]]
    assert upward == []


def test_no_module_over_400_lines() -> None:
    long = {m: n for m in modules() if (n := len((PACKAGE / f"{m}.py").read_text().splitlines())) > 400}
    assert long == {}
