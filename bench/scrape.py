"""Scrape time of ``spark-flow serve`` at 1,000 and 10,000 queues, this tree side by side with an
earlier commit's (``--against``, run from ``git archive`` in the same run, on the same homes).

Each home's queues are made with deltalake, as the suite makes them (bench/_serving.py: no Spark):
one commit of 8 messages each, every tenth held by a real gate; then a controller's scheduled run
(``availableNow``, in a local Spark session here) writes the home's status table, as one does
where a controller runs. Each version's serve is started as its users start it; a scrape is one
HTTP GET of ``/metrics`` with Prometheus' timeout header (10 s, as the shipped prometheus.yml
says): the first one as soon as serve listens, then, until one carries every queue, one a second
(the time until then is the first complete scrape), and until one is serve's own look (a
controller's status carries no ``spark_flow_consumer_backpressured``), then ``--scrapes`` warm
ones, a tenth of the queues given a new commit before each. Reported: each scrape's time, the
look it served (how long its read took, how old it was) and serve's CPU time per warm scrape;
the ratios this tree / the other. No timed assertion. Writes bench/scrape.json and
bench/scrape.png.

    .venv/bin/python bench/scrape.py [--sizes 1000 10000] [--scrapes 5] [--against 6f12abc] [--homes DIR]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report import figure, machine, parser, write_report
from _serving import ROOT, controller_run, cpu_seconds, enqueue, get, make_home, served, source_tree

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from spark_flow.flow.queue import Queue

TIMEOUT = {"X-Prometheus-Scrape-Timeout-Seconds": "10"}
#: A series only serve's own look has: the controller's status does not keep it.
OWN_LOOK = "spark_flow_consumer_backpressured"


def scrape(url: str) -> tuple[float, str]:
    began = time.perf_counter()
    status, text = get(f"{url}metrics", TIMEOUT)
    assert status == 200, text
    return time.perf_counter() - began, text


def value(text: str, metric: str) -> float | None:
    """A home gauge's value in a scrape, None if absent."""
    line = next((line for line in text.splitlines() if line.startswith(f"{metric}{{")), None)
    return float(line.rsplit(" ", 1)[1]) if line else None


def measure(tree: Path, home: str, queues: list[Queue], scrapes: int) -> dict[str, Any]:
    """One version's scrapes of one home (see the module's docstring)."""
    with served(tree, home) as (pid, url):
        started = time.perf_counter()
        first, text = scrape(url)
        first_complete = first if value(text, "spark_flow_queues") == len(queues) else None
        first_age = value(text, "spark_flow_look_age_seconds")
        while value(text, "spark_flow_queues") != len(queues):
            time.sleep(1)
            _, text = scrape(url)
        complete = time.perf_counter() - started
        while OWN_LOOK not in text:
            time.sleep(1)
            _, text = scrape(url)
        own = time.perf_counter() - started
        warm, looks, ages, cpu = [], [], [], []
        for round_ in range(scrapes):
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda queue: enqueue(queue, 1), queues[round_ % 10::10]))
            before = cpu_seconds(pid)
            took, text = scrape(url)
            cpu.append(cpu_seconds(pid) - before)
            warm.append(took)
            looks.append(value(text, "spark_flow_scrape_duration_seconds"))
            ages.append(value(text, "spark_flow_look_age_seconds") or 0.0)
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {"first_scrape_seconds": round(first, 3), "first_scrape_had_every_queue": first_complete is not None,
            "first_scrape_look_age_seconds": first_age,
            "first_complete_scrape_after_start_seconds": round(complete, 2),
            "first_own_look_after_start_seconds": round(own, 2),
            "warm_scrape_seconds": [round(t, 4) for t in warm], "median_warm_scrape_seconds": round(statistics.median(warm), 4),
            "max_warm_scrape_seconds": round(max(warm), 4),
            "median_look_seconds": round(statistics.median(v for v in looks if v is not None), 4),
            "median_look_age_seconds": round(statistics.median(ages), 3),
            "median_cpu_seconds_per_warm_scrape": round(statistics.median(cpu), 3), "series": series, "bytes": len(text)}


def main() -> None:
    options = parser(__doc__, "bench/scrape.json")
    options.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    options.add_argument("--scrapes", type=int, default=5, help="warm scrapes timed per size and version")
    options.add_argument("--against", default="6f12abc", help="the commit to compare with (default: 6f12abc)")
    options.add_argument("--homes", type=Path, help="where the homes are made, or were by an earlier run")
    args = options.parse_args()
    report: dict[str, Any] = {"machine": machine(), "against": args.against, "results": {}}
    trees = {args.against: source_tree(args.against), "this": ROOT}
    base = args.homes or Path(tempfile.mkdtemp(prefix="spark-flow-bench-scrape-"))
    for size in args.sizes:
        home, queues = make_home(base, size)
        report.setdefault("controller_run_seconds", {})[size] = controller_run(home)
        result: dict[str, Any] = {name: measure(tree, home, queues, args.scrapes) for name, tree in trees.items()}
        result["ratio_this_to_against"] = {key: round(result["this"][key] / result[args.against][key], 3)
                                           for key in ("median_warm_scrape_seconds", "first_complete_scrape_after_start_seconds",
                                                       "median_cpu_seconds_per_warm_scrape") if result[args.against][key]}
        report["results"][size] = result
        print(json.dumps({size: result}))
    write_report(args.out, report, plot(report["results"], args.against))


def plot(results: dict[int, dict[str, Any]], against: str) -> Figure:
    sizes = sorted(results)
    fig, axes = figure(ncols=3, figsize=(16, 4))
    for ax, key, title in ((axes[0], "median_warm_scrape_seconds", "warm scrape (median)"),
                           (axes[1], "first_scrape_seconds", "first scrape after serve starts"),
                           (axes[2], "first_complete_scrape_after_start_seconds", "first scrape with every queue")):
        for offset, name, label in ((-0.2, against, f"main at {against}"), (0.2, "this", "this tree")):
            ax.bar([i + offset for i in range(len(sizes))], [results[s][name][key] for s in sizes], width=0.4, label=label)
        ax.axhline(10, color="tab:red", linewidth=0.8, label="Prometheus' default timeout (10 s)")
        ax.axhline(2, color="tab:orange", linewidth=0.8, linestyle=":", label="2 s")
        ax.set_xticks(range(len(sizes)), [f"{s:,} queues" for s in sizes])
        ax.set_yscale("log")
        ax.set_ylabel("seconds")
        ax.set_title(f"spark-flow serve: {title}")
        ax.legend(fontsize="small")
    return fig


if __name__ == "__main__":
    main()
