"""Controller scaling: micro-batch time of the flow controller watching 1, 100 and 1,000 queues.

Queues are made with deltalake (a queue table with CDF and flow.* properties, a subscription
and a few enqueued commits each), registered in one home per size; the controller then runs in
this session and the median ``triggerExecution`` of its batches after the first is reported,
with the time per queue. Writes bench/controller.json and bench/controller.png.

    .venv/bin/python bench/controller.py [--sizes 1 100 1000] [--batches 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from spark_flow import get_spark
from spark_flow.controller import start_controller
from spark_flow.home import Registry
from spark_flow.queue import Queue
from spark_flow.status import FlowAdmin


def make_queue(path: str, name: str) -> None:
    """A declared queue without Spark: what ``declare`` writes, through deltalake."""
    import pyarrow as pa
    from deltalake import write_deltalake

    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "body": ["a", "b", "c"]})
    config = {"delta.enableChangeDataFeed": "true", "flow.queueName": name, "flow.stateLocation": f"{path}/_flow",
              "flow.stopCount": "2", "flow.resumeCount": "1"}
    write_deltalake(path, rows, mode="append", configuration=config)
    write_deltalake(path, rows, mode="append")
    queue = Queue(path)
    queue.subscriptions.create_table()
    queue.subscriptions.create("default", -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--batches", type=int, default=5, help="controller batches timed per size (after the first)")
    parser.add_argument("--out", default="bench/controller.json")
    args = parser.parse_args()
    spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-controller-"))
    results = {}
    for size in args.sizes:
        home = str(base / f"home{size}")
        registry = Registry(home)
        began = time.perf_counter()
        for i in range(size):
            path = str(base / f"q{size}" / f"queue{i}")
            make_queue(path, f"queue{i}")
            registry.register(f"queue{i}", path)
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
    report = {"machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}, "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2))
    plot(results, Path(args.out).with_suffix(".png"))


def plot(results: dict[int, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    ax.plot(sizes, [results[s]["median_batch_seconds"] for s in sizes], marker="o")
    ax.set_xscale("log")
    ax.set_xlabel("queues watched")
    ax.set_ylabel("controller micro-batch (s, median)")
    ax.set_title("flow controller: batch time against queues")
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
