"""Scrape time of ``spark-flow serve``: one Prometheus scrape of ``/metrics`` for a home of 1,
100 and 1,000 queues, read at scrape time (no controller, no cache between scrapes).

Each home's queues are made with deltalake, as the suite makes them (tests/support/homes.py: no Spark):
one commit of 8 messages each, every tenth queue held (flow-stopped by a real gate). The server
runs in this process and a scrape is one HTTP GET of ``/metrics``: the first one (cold: every
queue's handles opened), then ``--scrapes`` warm ones, with a tenth of the queues given a new
commit before each (a scrape reads the new commits and checks each small table's version). No
timed assertion: the report records the medians. Writes bench/scrape.json and bench/scrape.png.

    .venv/bin/python bench/scrape.py [--sizes 1 100 1000] [--scrapes 10]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from _report import figure, machine, parser, write_report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from homes import enqueue, http, look_as_a_producer, make_queue, serving

from spark_flow.flow.queue import Queue
from spark_flow.records.home import Registry

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def make_home(base: Path, size: int) -> tuple[str, list[Queue]]:
    """A home of ``size`` queues, each with 8 messages, every tenth held."""
    home = str(base / f"home{size}")

    def one(i: int) -> Queue:
        queue = make_queue(home, f"queue{i:04d}", {"stopCount": 5 if i % 10 == 0 else 100}, base=base / f"q{size}",
                           register=False)
        enqueue(queue, 8)
        if i % 10 == 0:
            look_as_a_producer(queue)
        return queue

    with ThreadPoolExecutor(8) as pool:
        queues = list(pool.map(one, range(size)))
    Registry(home).register_all({q.name: q.path for q in queues})
    return home, queues


def scrape(url: str) -> tuple[float, str]:
    began = time.perf_counter()
    status, text = http(f"{url}metrics")
    assert status == 200, text
    return time.perf_counter() - began, text


def main() -> None:
    options = parser(__doc__, "bench/scrape.json")
    options.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000])
    options.add_argument("--scrapes", type=int, default=10, help="warm scrapes timed per size")
    args = options.parse_args()
    report = {"machine": machine(), "results": {}}
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-scrape-"))
    for size in args.sizes:
        began = time.perf_counter()
        home, queues = make_home(base, size)
        setup = time.perf_counter() - began
        with serving(home) as server:
            cold, text = scrape(server.url)
            warm, looks = [], []
            for round_ in range(args.scrapes):
                for queue in queues[round_ % 10::10]:
                    enqueue(queue, 1)
                took, text = scrape(server.url)
                warm.append(took)
                looks.append(float(text.split("spark_flow_scrape_duration_seconds{")[1].split("} ")[1].split()[0]))
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        assert f'spark_flow_queues{{home="{home}"}} {float(size)}' in text
        report["results"][size] = {
            "queues": size, "setup_seconds": round(setup, 1), "series": series, "bytes": len(text),
            "cold_scrape_seconds": round(cold, 3), "warm_scrape_seconds": [round(t, 4) for t in warm],
            "median_warm_scrape_seconds": round(statistics.median(warm), 4), "max_warm_scrape_seconds": round(max(warm), 4),
            "median_look_seconds": round(statistics.median(looks), 4),
            "ms_per_queue": round(1000 * statistics.median(warm) / size, 3)}
        print(json.dumps(report["results"][size]))
    write_report(args.out, report, plot(report["results"]))


def plot(results: dict[int, dict]) -> Figure:
    sizes = sorted(results)
    fig, ax = figure(figsize=(6, 4))
    ax.plot(sizes, [results[s]["median_warm_scrape_seconds"] for s in sizes], marker="o", label="scrape (median, warm)")
    ax.plot(sizes, [results[s]["max_warm_scrape_seconds"] for s in sizes], marker=".", linestyle=":",
            label="scrape (slowest warm)")
    ax.plot(sizes, [results[s]["cold_scrape_seconds"] for s in sizes], marker="x", linestyle="--",
            label="first scrape (handles opened)")
    ax.axhline(1.0, color="tab:red", linewidth=0.8, label="1 s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("queues in the home")
    ax.set_ylabel("seconds")
    ax.set_title("spark-flow serve: one scrape of /metrics")
    ax.legend(fontsize="small")
    return fig


if __name__ == "__main__":
    main()
