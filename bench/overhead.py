"""Overhead of spark-flow against plain Delta streaming, side by side in one run.

Producer side: the same stream (a Delta source table, ``maxFilesPerTrigger`` 4) written by a plain
Delta streaming sink, by a foreachBatch doing Delta's idempotent write (``txnAppId`` /
``txnVersion``, the pattern Delta documents for foreachBatch) and by ``QueueSink`` (thresholds
never reached), ``availableNow``, each into its own declared queue table, so the three tables
are alike (properties, versions, Delta checkpoints). The middle one tells spark-flow's own cost
from foreachBatch's.
Consumer side: the queue table the sink wrote, read to the end by the native Delta streaming
source and by the ``flowqueue`` source (a new subscription at ``earliest``), both into Spark's
``noop`` sink so the time is the source's, ``availableNow``.

After one warm-up round (not counted), each side runs its variants for ``--rounds`` rounds, the
producers in a rotating order. A ratio is the median over rounds of the two variants' time
ratio in the same round: this machine's speed drifts by more than the overhead measured, and
comparing neighbours cancels the drift. Prints and writes JSON with the times, the ratios and
a bar chart of the median throughputs (PNG beside the JSON).

    .venv/bin/python bench/overhead.py [--rows 200000] [--commits 20] [--rounds 9] [--out bench/overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from spark_flow import QueueSink, declare, get_spark, open_queue, read_queue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", default="bench/overhead.json")
    args = parser.parse_args()
    load = os.getloadavg()
    spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-"))
    source = str(base / "source")
    per_commit = args.rows // args.commits
    for i in range(args.commits):
        (spark.range(i * per_commit, (i + 1) * per_commit)
         .selectExpr("id", "concat('payload-', id) AS body").write.format("delta").mode("append").save(source))

    def run(start: Callable[[DataFrame], StreamingQuery]) -> float:
        stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 4).load(source)
        began = time.perf_counter()
        start(stream).awaitTermination()
        return time.perf_counter() - began

    def produce(variant: str, tag: str) -> float:
        table, checkpoint = str(base / f"{variant}{tag}"), str(base / f"cp_{variant}{tag}")
        # Every variant writes its own declared queue table, so the tables are alike (same
        # properties, same versions, the same Delta checkpoints fall in the run).
        declare(spark, table, "id BIGINT, body STRING", settings={"stopCount": 10 * args.rows})
        if variant == "plain_delta":
            return run(lambda s: s.writeStream.format("delta").option("checkpointLocation", checkpoint)
                       .trigger(availableNow=True).start(table))
        sink = IdempotentWrite(table) if variant == "foreach_batch_delta" else QueueSink(
            table, options={"capacity": args.rows})
        return run(lambda s: s.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
                   .trigger(availableNow=True).start())

    producers = ["plain_delta", "foreach_batch_delta", "queue_sink"]
    for variant in producers:  # warm-up: the JVM's JIT and Spark's caches, not counted
        produce(variant, "_warmup")
    results: dict[str, list[float]] = {variant: [] for variant in producers}
    for round_ in range(args.rounds):
        order = producers[round_ % 3:] + producers[:round_ % 3]  # no variant always runs first
        for variant in order:
            results[variant].append(produce(variant, str(round_)))
    # Consumer side: read the queue the sink wrote in round 0 to its end, both ways.
    queue = str(base / "queue_sink0")
    handle = open_queue(queue)
    for round_ in range(args.rounds):
        results.setdefault("delta_source", []).append(run_reader(
            spark.readStream.format("delta").load(queue), str(base / f"cp_read_delta{round_}")))
        handle.create_subscription(f"bench{round_}", "earliest")
        results.setdefault("flowqueue_source", []).append(run_reader(
            read_queue(spark, queue, subscription=f"bench{round_}"), str(base / f"cp_read_flow{round_}")))
    medians = {k: statistics.median(v) for k, v in results.items()}
    report = {
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load},
        "rows": args.rows, "source_commits": args.commits, "rounds": args.rounds, "seconds": results,
        "rows_per_second": {k: args.rows / v for k, v in medians.items()},
        "queue_sink_over_plain_time_ratio": paired_ratio(results["queue_sink"], results["plain_delta"]),
        "foreach_batch_over_plain_time_ratio": paired_ratio(results["foreach_batch_delta"], results["plain_delta"]),
        "queue_sink_over_foreach_batch_time_ratio": paired_ratio(results["queue_sink"],
                                                                 results["foreach_batch_delta"]),
        "flowqueue_over_delta_source_time_ratio": paired_ratio(results["flowqueue_source"], results["delta_source"]),
        "round_ratios": {name: [round(t / b, 3) for t, b in zip(results[variant], results[baseline], strict=True)]
                         for name, (variant, baseline) in ROUND_RATIOS.items()},
        "queue_commits_read": handle.refresh(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    plot(report, out.with_suffix(".png"))
    print(json.dumps(report, indent=2))


ROUND_RATIOS = {
    "queue_sink_over_plain": ("queue_sink", "plain_delta"),
    "foreach_batch_over_plain": ("foreach_batch_delta", "plain_delta"),
    "flowqueue_over_delta_source": ("flowqueue_source", "delta_source"),
}


def paired_ratio(times: list[float], baseline: list[float]) -> float:
    """The median over rounds of each round's time ratio: a variant is compared with the
    baseline run beside it, so a slow spell of the machine cancels out."""
    return statistics.median(t / b for t, b in zip(times, baseline, strict=True))


class IdempotentWrite:
    """foreachBatch: append the batch to a Delta table once, as Delta documents it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        (batch.write.format("delta").mode("append").option("txnAppId", "bench-foreach-batch")
         .option("txnVersion", str(batch_id)).save(self.path))


def run_reader(stream: DataFrame, checkpoint: str) -> float:
    """Seconds to read ``stream`` to its end into the noop sink."""
    began = time.perf_counter()
    (stream.writeStream.format("noop").option("checkpointLocation", checkpoint)
     .trigger(availableNow=True).start().awaitTermination())
    return time.perf_counter() - began


def plot(report: dict, path: Path) -> None:
    """Bars: rows per second of each variant, producer side and consumer side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = report["rows_per_second"]
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    names = ["plain_delta", "foreach_batch_delta", "queue_sink", "delta_source", "flowqueue_source"]
    labels = ["producer:\nDelta sink", "producer:\nforeachBatch\nDelta write", "producer:\nQueueSink",
              "consumer:\nDelta source", "consumer:\nflowqueue"]
    bars = ax.bar(labels, [rates[n] for n in names], color=["tab:gray", "tab:gray", "tab:blue", "tab:gray", "tab:blue"])
    ax.bar_label(bars, fmt="%.0f")
    ax.set_ylabel("rows per second (median round)")
    ax.set_title(f"{report['rows']:,} rows: QueueSink/plain time x{report['queue_sink_over_plain_time_ratio']:.2f}, "
                 f"flowqueue/Delta time x{report['flowqueue_over_delta_source_time_ratio']:.2f}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
