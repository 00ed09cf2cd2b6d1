"""The README and the docs/ pages as tests read them: a page's section by its heading, and the
```bash, ```python and ```text blocks in it. A test names the page and the section it runs
(``bash_blocks("docs/operations.md", "Monitoring")``); ``test_docs`` reads those calls from the
tests' source and fails for a block of commands or Python that no test reads."""

from __future__ import annotations

import ast
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT

__all__ = ["BIN", "PAGES", "ROOT", "Block", "bash_blocks", "blocks", "python_blocks", "read_by_tests", "section",
           "section_lines", "text_blocks"]

#: The venv's scripts (``spark-submit``, ``spark-flow``): where a page's command lines find them.
BIN = Path(sys.executable).parent
#: Every page a newcomer reads: the README, then docs/.
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
#: The helpers whose calls name a page and its sections (the coverage test reads them).
READERS = {"section", "bash_blocks", "python_blocks", "text_blocks"}

HEADING = re.compile(r"(#{1,6}) (.*)")
FENCE = re.compile(r"\s*```(\w*)")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language (the fence's word), its first line (1-based) and
    the headings it sits under."""

    page: str
    language: str
    line: int
    headings: tuple[str, ...]


def _headings(page: str) -> list[tuple[int, int, str]]:
    """(line index, level, text) of every heading outside fenced blocks."""
    found, fenced = [], False
    for i, line in enumerate((ROOT / page).read_text().splitlines()):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.fullmatch(line)):
            found.append((i, len(m[1]), m[2]))
    return found


def section_lines(page: str, heading: str) -> tuple[int, int]:
    """The lines [start, end) of the one section whose heading starts with ``heading``: to the
    next heading of its level or above (its subsections are in it)."""
    headings = _headings(page)
    matches = [(i, level) for i, level, text in headings if text.startswith(heading)]
    if len(matches) != 1:
        raise LookupError(f"{page}: {len(matches)} sections start with {heading!r}")
    start, level = matches[0]
    end = next((i for i, other, _ in headings if i > start and other <= level),
               len((ROOT / page).read_text().splitlines()))
    return start, end


def section(page: str, heading: str) -> str:
    """The text of a page's section, its heading line included."""
    start, end = section_lines(page, heading)
    return "\n".join((ROOT / page).read_text().splitlines()[start:end]) + "\n"


def _fenced(page: str, heading: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(page, heading), re.S)


def bash_blocks(page: str, heading: str) -> list[list[list[str]]]:
    """The ```bash blocks of a section, each as its commands (``\\`` continuations joined,
    comments dropped), each command as its words."""
    commands = [[shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
                for block in _fenced(page, heading, "bash")]
    return [[words for words in block if words] for block in commands]


def python_blocks(page: str, *headings: str) -> list[str]:
    """The ```python blocks of these sections of a page, in order."""
    return [block for heading in headings for block in _fenced(page, heading, "python")]


def text_blocks(page: str, heading: str) -> list[str]:
    """The ```text blocks of a section (a command's output as the page shows it)."""
    return _fenced(page, heading, "text")


def blocks(page: str) -> list[Block]:
    """Every fenced block of a page, with the headings it sits under."""
    found, fenced, open_headings = [], False, []
    for i, line in enumerate((ROOT / page).read_text().splitlines()):
        if m := FENCE.match(line):
            if not fenced:
                found.append(Block(page, m[1], i + 1, tuple(text for _, text in open_headings)))
            fenced = not fenced
        elif not fenced and (h := HEADING.fullmatch(line)):
            open_headings = [(level, text) for level, text in open_headings if level < len(h[1])]
            open_headings.append((len(h[1]), h[2]))
    return found


def read_by_tests(tests: Path = ROOT / "tests") -> set[tuple[str, str]]:
    """(page, heading) of every call of this module's readers with a literal page and heading
    in the tests' source: what the suite reads of the pages."""
    read = set()
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in READERS:
                words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                read.update((words[0], heading) for heading in words[1:])
    return read
