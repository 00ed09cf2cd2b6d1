"""The console of ``spark-flow serve`` at 1,000 and 10,000 queues, this tree side by side with an
earlier commit's (``--against``, run from ``git archive`` in the same run, on the same homes).

The homes are bench/scrape.py's (bench/_serving.py: 8 messages a queue, every tenth held by a
real gate; a controller's scheduled run writes the status table). Each version's serve is started
as its users start it, and in the suite's headless Chromium (1400 x 1000):
- first rows: the page opened as soon as serve listens, while its first look (which opens every
  table) is under way, to its queue rows drawn, and what they were read from;
- first data: the page's data asked for until it is serve's own look (its first look's end);
- first paint: then, from opening the page to its queue rows drawn (a page that has drawn none after
  ``--patience`` seconds is reported as such), with the rows drawn and the pipeline graph's height;
- refresh: ``--refreshes`` requests of the page's data as the page sends them (this tree's with
  the digest of the answer it has), each one's time and serve's CPU time over it;
- an open tab: serve's CPU time over ``--open`` seconds with the page open, as a share of a core.
Ratios this tree / the other. No timed assertion. Writes bench/console.json and bench/console.png.
``--screenshot PATH`` also saves the console of a home of 200 queues with a chain of four (its
first held by its depth, its last by an operator), the list's first page shown and the chain's
first queue selected (docs/console.png is made so).

    .venv/bin/python bench/console.py [--sizes 1000 10000] [--against 0721b01] [--homes DIR] [--screenshot PATH]
        [--out bench/console.json]
"""

from __future__ import annotations

import base64
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report import figure, machine, parser, write_report
from _serving import ROOT, controller_run, cpu_seconds, get, make_home, served, source_tree
from selenium.common.exceptions import TimeoutException
from support.pages import click, rows, wait
from support.servers import chromium

from spark_flow.ops.admin import FlowAdmin

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def data(url: str, seen: str = "") -> dict[str, Any]:
    """The page's data as the page asks for it (the first page of the list, the digest it has)."""
    status, text = get(f"{url}api/overview" + (f"?seen={seen}" if seen else ""))
    assert status == 200, text[:200]
    answer: dict[str, Any] = json.loads(text)
    return answer


def measure(browser: Any, tree: Path, home: str, refreshes: int, patience: float, open_for: float) -> dict[str, Any]:
    """One version's console on one home (see the module's docstring)."""
    with served(tree, home) as (pid, url):
        began = time.perf_counter()
        browser.get(url)
        try:
            wait(browser, lambda d: rows(d) or None, patience)
            first_rows: float | None = time.perf_counter() - began
            read_from = browser.execute_script("return lastData.read_from") or "tables"
        except TimeoutException:
            first_rows, read_from = None, None
        browser.get("about:blank")
        answer = data(url)
        while answer.get("read_from", "tables") != "tables":  # the controller's look, during serve's first
            time.sleep(0.5)
            answer = data(url)
        ready = time.perf_counter() - began
        began = time.perf_counter()
        browser.get(url)
        try:
            drawn = len(wait(browser, lambda d: rows(d) or None, patience))
            paint: float | None = time.perf_counter() - began
        except TimeoutException:
            drawn, paint = 0, None
        graph = browser.execute_script('return document.getElementById("pipeline").getBoundingClientRect().height')
        before = cpu_seconds(pid)
        time.sleep(open_for)  # the page refreshes on its own meanwhile: what an open tab costs
        tab = (cpu_seconds(pid) - before) / open_for
        browser.get("about:blank")
        took, cpu = [], []
        for _ in range(refreshes):
            before, began = cpu_seconds(pid), time.perf_counter()
            answer = data(url, answer.get("digest", ""))
            took.append(time.perf_counter() - began)
            cpu.append(cpu_seconds(pid) - before)
    return {"first_rows_seconds": None if first_rows is None else round(first_rows, 2), "first_rows_read_from": read_from,
            "first_data_seconds": round(ready, 2), "first_paint_seconds": None if paint is None else round(paint, 2),
            "rows_drawn": drawn, "pipeline_height_px": round(graph), "refresh_seconds": [round(t, 4) for t in took],
            "median_refresh_seconds": round(statistics.median(took), 4),
            "median_server_cpu_seconds_per_refresh": round(statistics.median(cpu), 3),
            "open_tab_cpu_share_of_a_core": round(tab, 3), "refresh_answer_bytes": len(json.dumps(answer))}


def screenshot(browser: Any, base: Path, path: Path) -> None:
    """The console of a home of 200 queues whose first four form a chain, its first held by its
    depth and its last by an operator."""
    home, _ = make_home(base / "screenshot", 200, chain=4)
    FlowAdmin(home).stop_producers("queue00003")
    with served(ROOT, home) as (_, url):
        browser.get(url)
        wait(browser, lambda d: len(rows(d)) == 50)
        click(browser, 'tr.queue[data-queue="queue00000"] td.name')
        wait(browser, lambda d: d.execute_script("return new Set(live.map((p) => p.t)).size >= 2"))  # a line, not a dot
        size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
        browser.get("about:blank")


def main() -> None:
    options = parser(__doc__, "bench/console.json")
    options.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    options.add_argument("--against", default="0721b01", help="the commit to compare with (default: 0721b01)")
    options.add_argument("--homes", type=Path, help="where the homes are made, or were by an earlier run")
    options.add_argument("--refreshes", type=int, default=5, help="refreshes timed per size and version")
    options.add_argument("--patience", type=float, default=90, help="seconds a first paint is waited for")
    options.add_argument("--open", type=float, default=20, help="seconds the page is left open")
    options.add_argument("--screenshot", type=Path, help="also save the console of a home with a chain here")
    args = options.parse_args()
    report: dict[str, Any] = {"machine": machine(), "against": args.against, "results": {}}
    trees = {args.against: source_tree(args.against), "this": ROOT}
    base = args.homes or Path(tempfile.mkdtemp(prefix="spark-flow-bench-console-"))
    with chromium(base / "chromium", base / "chromedriver.log") as browser:
        for size in args.sizes:
            home, _ = make_home(base, size)
            report.setdefault("controller_run_seconds", {})[size] = controller_run(home)
            result: dict[str, Any] = {name: measure(browser, tree, home, args.refreshes, args.patience, args.open)
                                      for name, tree in trees.items()}
            result["ratio_this_to_against"] = {
                key: round(result["this"][key] / result[args.against][key], 4)
                for key in ("first_rows_seconds", "first_paint_seconds", "median_refresh_seconds", "median_server_cpu_seconds_per_refresh",
                            "open_tab_cpu_share_of_a_core", "pipeline_height_px") if result[args.against][key]}
            report["results"][size] = result
            print(json.dumps({size: result}))
        if args.screenshot:
            screenshot(browser, base, args.screenshot)
    write_report(args.out, report, plot(report["results"], args.against, args.patience))


def plot(results: dict[int, dict[str, Any]], against: str, patience: float) -> Figure:
    sizes = sorted(results)
    fig, axes = figure(ncols=4, figsize=(18, 4))
    panels = (("first_rows_seconds", "first rows, serve just started (s)", 1.0),
              ("first_paint_seconds", "first paint (s; none drawn: the wait's end)", 1.0),
              ("median_server_cpu_seconds_per_refresh", "serve's CPU per refresh (s)", 0.5),
              ("open_tab_cpu_share_of_a_core", "an open tab: serve's share of a core", None))
    for ax, (key, title, goal) in zip(axes, panels, strict=True):
        for offset, name, label in ((-0.2, against, f"main at {against}"), (0.2, "this", "this tree")):
            values = [results[s][name][key] if results[s][name][key] is not None else patience for s in sizes]
            ax.bar([i + offset for i in range(len(sizes))], [max(v, 1e-3) for v in values], width=0.4, label=label)
        if goal is not None:
            ax.axhline(goal, color="tab:red", linewidth=0.8, label=f"{goal:g} s")
        ax.set_xticks(range(len(sizes)), [f"{s:,} queues" for s in sizes])
        ax.set_yscale("log")
        ax.set_title(title, fontsize="medium")
        ax.legend(fontsize="small")
    fig.suptitle("spark-flow serve's console")
    return fig


if __name__ == "__main__":
    main()
