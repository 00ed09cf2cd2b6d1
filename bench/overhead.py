"""Overhead of spark-flow against plain Delta streaming, side by side in one run.

Producer side: the same stream (a Delta source table, ``maxFilesPerTrigger`` 4) written by a plain
Delta streaming sink, by a foreachBatch doing Delta's idempotent write (``txnAppId`` /
``txnVersion``, the pattern Delta documents for foreachBatch) and by ``QueueSink`` (thresholds
never reached), ``availableNow``. The middle one tells spark-flow's own cost from foreachBatch's.
Consumer side: the queue table the sink wrote, read to the end by the native Delta streaming
source and by the ``flowqueue`` source (a new subscription at ``earliest``), both into Spark's
``noop`` sink so the time is the source's, ``availableNow``. Each side alternates its two
variants for ``--rounds`` rounds; the best time of each counts. Prints and writes JSON with the
time ratios and a bar chart of the throughputs (PNG beside the JSON).

    .venv/bin/python bench/overhead.py [--rows 200000] [--commits 20] [--out bench/overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
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
    parser.add_argument("--rounds", type=int, default=3)
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

    results: dict[str, list[float]] = {"plain_delta": [], "foreach_batch_delta": [], "queue_sink": []}
    for round_ in range(args.rounds):
        plain, queue = str(base / f"plain{round_}"), str(base / f"queue{round_}")
        declare(spark, queue, "id BIGINT, body STRING", settings={"stopCount": 10 * args.rows})
        results["plain_delta"].append(run(lambda s, p=plain, r=round_: s.writeStream.format("delta")
                                          .option("checkpointLocation", str(base / f"cp_plain{r}"))
                                          .trigger(availableNow=True).start(p)))
        results["foreach_batch_delta"].append(run(lambda s, r=round_: s.writeStream
                                                  .foreachBatch(IdempotentWrite(str(base / f"fb{r}")))
                                                  .option("checkpointLocation", str(base / f"cp_fb{r}"))
                                                  .trigger(availableNow=True).start()))
        results["queue_sink"].append(run(lambda s, q=queue, r=round_: s.writeStream
                                         .foreachBatch(QueueSink(q, options={"capacity": args.rows}))
                                         .option("checkpointLocation", str(base / f"cp_queue{r}"))
                                         .trigger(availableNow=True).start()))
    # Consumer side: read the queue the sink wrote in round 0 to its end, both ways.
    queue = str(base / "queue0")
    handle = open_queue(queue)
    for round_ in range(args.rounds):
        results.setdefault("delta_source", []).append(run_reader(
            spark.readStream.format("delta").load(queue), str(base / f"cp_read_delta{round_}")))
        handle.create_subscription(f"bench{round_}", "earliest")
        results.setdefault("flowqueue_source", []).append(run_reader(
            read_queue(spark, queue, subscription=f"bench{round_}"), str(base / f"cp_read_flow{round_}")))
    best = {k: min(v) for k, v in results.items()}
    report = {
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load},
        "rows": args.rows, "source_commits": args.commits, "rounds": args.rounds, "seconds": results,
        "rows_per_second": {k: args.rows / v for k, v in best.items()},
        "queue_sink_over_plain_time_ratio": best["queue_sink"] / best["plain_delta"],
        "foreach_batch_over_plain_time_ratio": best["foreach_batch_delta"] / best["plain_delta"],
        "queue_sink_over_foreach_batch_time_ratio": best["queue_sink"] / best["foreach_batch_delta"],
        "flowqueue_over_delta_source_time_ratio": best["flowqueue_source"] / best["delta_source"],
        "queue_commits_read": handle.refresh(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    plot(report, out.with_suffix(".png"))
    print(json.dumps(report, indent=2))


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
    ax.set_ylabel("rows per second (best round)")
    ax.set_title(f"{report['rows']:,} rows: QueueSink/plain time x{report['queue_sink_over_plain_time_ratio']:.2f}, "
                 f"flowqueue/Delta time x{report['flowqueue_over_delta_source_time_ratio']:.2f}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
