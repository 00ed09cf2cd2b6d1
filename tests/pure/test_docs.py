"""The README and docs/ pages hold no promise nobody checks: every block of commands or Python
in them is in a section some test reads (and runs: each test says how), every section a test
reads is there, and every relative link points at a file and heading that exist. Reads files
only."""

from __future__ import annotations

import re
from pathlib import Path

from support.docs import PAGES, ROOT, blocks, read_by_tests, section_lines

#: The fences of what a reader would run: commands and Python.
RUNNABLE = {"bash", "sh", "shell", "console", "python", "py", "pycon"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_every_block_of_commands_or_python_is_read_by_a_test() -> None:
    read = read_by_tests()
    spans = {(page, heading): section_lines(page, heading) for page, heading in read}
    unread = [f"{b.page}:{b.line} ```{b.language} under {' / '.join(b.headings)}"
              for page in PAGES for b in blocks(page) if b.language in RUNNABLE
              and not any(p == page and start < b.line <= end for (p, _), (start, end) in spans.items())]
    assert unread == []


def test_every_section_a_test_reads_is_on_its_page() -> None:
    missing = []
    for page, heading in sorted(read_by_tests()):
        try:
            section_lines(page, heading)
        except (LookupError, FileNotFoundError) as error:
            missing.append(str(error))
    assert missing == []


def _slugs(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside fenced blocks)."""
    slugs: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.fullmatch(r"#{1,6} (.*)", line)):
            slug = re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            n, unique = 0, slug
            while unique in slugs:
                n += 1
                unique = f"{slug}-{n}"
            slugs.add(unique)
    return slugs


def test_every_relative_link_points_at_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", (ROOT / page).read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not this suite's to check
            path, _, anchor = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            if not file.exists():
                broken.append(f"{page}: {target} (no file)")
            elif anchor and (file.suffix != ".md" or anchor not in _slugs(file)):
                broken.append(f"{page}: {target} (no heading)")
    assert broken == []


def test_the_readme_is_a_front_door() -> None:
    """What spark-flow is, the Quickstart, the walkthrough and links: the rest is in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
