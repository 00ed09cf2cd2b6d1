"""Controller scaling: micro-batch time of the flow controller watching 1, 100, 1,000 and 5,000 queues.

Queues are copies of one declared queue (3 messages enqueued, stop 2 / resume 1, so every queue
is flow-stopped), registered in one home per size (one registry commit for them all); the
controller then runs in this session and the median ``triggerExecution`` of its batches after
the first is reported, with the time per queue. Writes bench/controller.json and
bench/controller.png.

    .venv/bin/python bench/controller.py [--sizes 1 100 1000 5000] [--batches 5]
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _report import figure, local_conf, machine, parser, write_report

from spark_flow import declare, get_spark
from spark_flow.admin import FlowAdmin
from spark_flow.controller import start_controller
from spark_flow.home import Registry
from spark_flow.queue import Queue

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def copy_queue(template: Queue, path: str, name: str) -> None:
    """A copy of a declared queue, with its own name and subscriptions: the table directory
    (its ``_flow`` state inside) copied and its log's queue name and state location rewritten.
    Declaring 1,000 queues through Spark would take most of an hour on 2 cores, and deltalake
    refuses to write the ``flow.*`` properties itself."""
    shutil.copytree(template.path, path)
    for log in Path(path, "_delta_log").glob("*.json"):
        text = log.read_text().replace(template.path, path)
        log.write_text(text.replace(f'"flow.queueName":"{template.name}"', f'"flow.queueName":"{name}"'))
    for crc in Path(path, "_delta_log").glob("*.crc"):
        crc.unlink()


def main() -> None:
    options = parser(__doc__, "bench/controller.json")
    options.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000, 5000])
    options.add_argument("--batches", type=int, default=5, help="controller batches timed per size (after the first)")
    args = options.parse_args()
    report = {"machine": machine(), "results": {}}
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    template = declare(spark, str(Path(tempfile.mkdtemp(prefix="spark-flow-bench-template-")) / "template"),
                       "id BIGINT, body STRING", settings={"stopCount": 2, "resumeCount": 1})
    spark.range(3).selectExpr("id", "'m' AS body").write.format("delta").mode("append").save(template.path)
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-controller-"))
    results = report["results"]
    for size in args.sizes:
        home = str(base / f"home{size}")
        began = time.perf_counter()
        queues = {f"queue{i}": str(base / f"q{size}" / f"queue{i}") for i in range(size)}
        for name, path in queues.items():
            copy_queue(template, path, name)
        Registry(home).register_all(queues)
        setup = time.perf_counter() - began
        query = start_controller(spark, home, trigger="100 milliseconds",
                                 checkpoint_location=str(base / f"checkpoint{size}"))
        while len(query.recentProgress) < args.batches + 1 and query.isActive:
            time.sleep(0.5)
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in query.recentProgress[1:args.batches + 1]]
        query.stop()
        stopped = FlowAdmin(home).status()["flow_stopped"].sum()
        median = statistics.median(durations)
        results[size] = {"queues": size, "setup_seconds": round(setup, 1), "batch_seconds": durations,
                         "median_batch_seconds": round(median, 3), "ms_per_queue": round(1000 * median / size, 2),
                         "queues_flow_stopped_in_status": int(stopped)}
        print(json.dumps(results[size]))
    write_report(args.out, report, plot(results))


def plot(results: dict[int, dict]) -> Figure:
    sizes = sorted(results)
    fig, ax = figure(figsize=(6, 4))
    ax.plot(sizes, [results[s]["median_batch_seconds"] for s in sizes], marker="o")
    ax.set_xscale("log")
    ax.set_xlabel("queues watched")
    ax.set_ylabel("controller micro-batch (s, median)")
    ax.set_title("flow controller: batch time against queues")
    return fig


if __name__ == "__main__":
    main()
