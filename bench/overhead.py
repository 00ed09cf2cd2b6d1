"""Overhead of spark-flow against plain Delta streaming, side by side in one run.

Producer side: the same stream (a Delta source table, ``maxFilesPerTrigger`` 4) written by a plain
Delta streaming sink, by a foreachBatch doing Delta's idempotent write (``txnAppId`` /
``txnVersion``, the pattern Delta documents for foreachBatch) and by ``QueueSink`` (thresholds
never reached), ``availableNow``, each into its own declared queue table, so the three tables
are alike (properties, versions, Delta checkpoints). The middle one tells spark-flow's own cost
from foreachBatch's.
Consumer side: the queue table the sink wrote, read to the end by the native Delta streaming
source and by the ``flowqueue`` source (a new subscription at ``earliest``), both into Spark's
``noop`` sink so the time is the source's, ``availableNow``, one producer batch (one commit) a
micro-batch: ``maxFilesPerTrigger`` of a commit's files, ``maxRecordsPerTrigger`` of its rows.

After one warm-up round (not counted), each side runs its variants for ``--rounds`` rounds in a
rotating order. A ratio is the median over rounds of the two variants' time ratio in the same
round: this machine's speed drifts by more than the overhead measured, and comparing neighbours
cancels the drift. Each query's progress also gives its micro-batches' ``durationMs``: the
median batch of each variant (over every counted round), what the sink adds to a batch in
milliseconds (a figure that does not depend on how many batches a run has), and the seconds a
run spends outside its batches (starting and stopping the query). Prints and writes JSON with
the times and the ratios, and bar charts of the throughputs and batch times (PNG beside the JSON).

    .venv/bin/python bench/overhead.py [--rows 200000] [--commits 20] [--rounds 15] [--out bench/overhead.json]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from _report import append_once, figure, local_conf, machine, parser, write_report
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from spark_flow import QueueSink, declare, get_spark, open_queue, read_queue

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def main() -> None:
    options = parser(__doc__, "bench/overhead.json")
    options.add_argument("--rows", type=int, default=200_000)
    options.add_argument("--commits", type=int, default=20)
    options.add_argument("--rounds", type=int, default=15, help="counted rounds, at least 2 (the round ratios' quartiles)")
    args = options.parse_args()
    if args.rounds < 2:
        options.error(f"--rounds={args.rounds}: at least 2 (the report gives the round ratios' quartiles)")
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-"))
    source = str(base / "source")
    per_commit = args.rows // args.commits
    for i in range(args.commits):
        (spark.range(i * per_commit, (i + 1) * per_commit)
         .selectExpr("id", "concat('payload-', id) AS body").write.format("delta").mode("append").save(source))

    def run(start: Callable[[DataFrame], StreamingQuery]) -> Run:
        stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 4).load(source)
        return timed(lambda: start(stream))

    def produce(variant: str, tag: str) -> Run:
        table, checkpoint = str(base / f"{variant}{tag}"), str(base / f"cp_{variant}{tag}")
        # Every variant writes its own declared queue table, so the tables are alike (same
        # properties, same versions, the same Delta checkpoints fall in the run).
        declare(spark, table, "id BIGINT, body STRING", settings={"stopCount": 10 * args.rows})
        if variant == "plain_delta":
            return run(lambda s: s.writeStream.format("delta").option("checkpointLocation", checkpoint)
                       .trigger(availableNow=True).start(table))
        sink = idempotent_write(table) if variant == "foreach_batch_delta" else QueueSink(
            table, options={"capacity": args.rows})
        return run(lambda s: s.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
                   .trigger(availableNow=True).start())

    producers = ["plain_delta", "foreach_batch_delta", "queue_sink"]
    for variant in producers:  # warm-up: the JVM's JIT and Spark's caches, not counted
        produce(variant, "_warmup")
    runs: dict[str, list[Run]] = {variant: [] for variant in producers}
    for round_ in range(args.rounds):
        order = producers[round_ % 3:] + producers[:round_ % 3]  # no variant always runs first
        for variant in order:
            runs[variant].append(produce(variant, str(round_)))
    # Consumer side: the queue the sink wrote in round 0, read to its end both ways, a producer
    # batch (one sink commit) a micro-batch, after a warm-up read each (Python workers start).
    queue = str(base / "queue_sink0")
    handle = open_queue(queue)
    rows_per_batch = args.rows // len(runs["queue_sink"][0].batches)
    files_per_batch = round(len(handle.ledger.table.file_uris()) / len(runs["queue_sink"][0].batches))

    def consume(variant: str, tag: str) -> Run:
        checkpoint = str(base / f"cp_{variant}{tag}")
        if variant == "delta_source":
            stream = spark.readStream.format("delta").option("maxFilesPerTrigger", files_per_batch).load(queue)
        else:
            handle.create_subscription(f"bench{tag}", "earliest")
            stream = read_queue(spark, queue, subscription=f"bench{tag}", maxRecordsPerTrigger=rows_per_batch)
        return timed(lambda: stream.writeStream.format("noop").option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())

    consumers = ["delta_source", "flowqueue_source"]
    for variant in consumers:
        consume(variant, "_warmup")
    for round_ in range(args.rounds):
        for variant in consumers[round_ % 2:] + consumers[:round_ % 2]:
            runs.setdefault(variant, []).append(consume(variant, str(round_)))
    results = {k: [r.seconds for r in v] for k, v in runs.items()}
    medians = {k: statistics.median(v) for k, v in results.items()}
    batches = {variant: batch_medians(v) for variant, v in runs.items()}
    report = {
        "machine": at_start,
        "rows": args.rows, "source_commits": args.commits, "rounds": args.rounds, "seconds": results,
        "rows_per_second": {k: args.rows / v for k, v in medians.items()},
        "queue_sink_over_plain_time_ratio": paired_ratio(results["queue_sink"], results["plain_delta"]),
        "foreach_batch_over_plain_time_ratio": paired_ratio(results["foreach_batch_delta"], results["plain_delta"]),
        "queue_sink_over_foreach_batch_time_ratio": paired_ratio(results["queue_sink"],
                                                                 results["foreach_batch_delta"]),
        "flowqueue_over_delta_source_time_ratio": paired_ratio(results["flowqueue_source"], results["delta_source"]),
        "round_ratios": {name: [round(t / b, 3) for t, b in zip(results[variant], results[baseline], strict=True)]
                         for name, (variant, baseline) in ROUND_RATIOS.items()},
        "round_ratio_quartiles": {name: [round(q, 3) for q in statistics.quantiles(
            [t / b for t, b in zip(results[variant], results[baseline], strict=True)], n=4)]
            for name, (variant, baseline) in ROUND_RATIOS.items()},
        "batches_per_run": {k: statistics.median(len(r.batches) for r in v) for k, v in runs.items()},
        "median_batch_ms": batches,
        "median_seconds_outside_batches": {k: statistics.median(r.outside_batches for r in v) for k, v in runs.items()},
        "queue_sink_over_plain_batch_ratio": (batches["queue_sink"]["triggerExecution"]
                                              / batches["plain_delta"]["triggerExecution"]),
        "queue_sink_added_ms_per_batch": batches["queue_sink"]["addBatch"] - batches["plain_delta"]["addBatch"],
        "flowqueue_over_delta_source_batch_ratio": (batches["flowqueue_source"]["triggerExecution"]
                                                    / batches["delta_source"]["triggerExecution"]),
        "queue_commits_read": handle.refresh(),
    }
    write_report(args.out, report, plot(report))


ROUND_RATIOS = {
    "queue_sink_over_plain": ("queue_sink", "plain_delta"),
    "foreach_batch_over_plain": ("foreach_batch_delta", "plain_delta"),
    "flowqueue_over_delta_source": ("flowqueue_source", "delta_source"),
}


def paired_ratio(times: list[float], baseline: list[float]) -> float:
    """The median over rounds of each round's time ratio: a variant is compared with the
    baseline run beside it, so a slow spell of the machine cancels out."""
    return statistics.median(t / b for t, b in zip(times, baseline, strict=True))


def idempotent_write(path: str) -> Callable[[DataFrame, int], None]:
    """foreachBatch: append the batch to a Delta table once, as Delta documents it (nothing else:
    no count, no cache, so it is the baseline of a foreachBatch's own cost)."""
    return lambda batch, batch_id: append_once(batch, path, "bench-foreach-batch", batch_id)


@dataclass(frozen=True)
class Run:
    """One query run to its end: wall seconds from start, and each micro-batch's ``durationMs``."""

    seconds: float
    batches: list[dict[str, int]]

    @property
    def outside_batches(self) -> float:
        """Seconds of the run spent starting and stopping the query, not in its micro-batches."""
        return self.seconds - sum(b["triggerExecution"] for b in self.batches) / 1000


def timed(start: Callable[[], StreamingQuery]) -> Run:
    """Start an ``availableNow`` query and wait for its end."""
    began = time.perf_counter()
    query = start()
    query.awaitTermination()
    seconds = time.perf_counter() - began
    return Run(seconds, [p.durationMs for p in query.recentProgress if p.numInputRows])


def batch_medians(runs: list[Run]) -> dict[str, float]:
    """The median micro-batch of a variant over all its runs: the whole trigger, and the sink's
    part of it (``addBatch``), in milliseconds."""
    return {phase: statistics.median(b[phase] for r in runs for b in r.batches)
            for phase in ("triggerExecution", "addBatch")}


def plot(report: dict) -> Figure:
    """Bars of each variant, producer side and consumer side: rows per second over whole runs
    (left), and the median micro-batch in milliseconds (right)."""
    names = ["plain_delta", "foreach_batch_delta", "queue_sink", "delta_source", "flowqueue_source"]
    labels = ["producer:\nDelta sink", "producer:\nforeachBatch\nDelta write", "producer:\nQueueSink",
              "consumer:\nDelta source", "consumer:\nflowqueue"]
    colors = ["tab:gray", "tab:gray", "tab:blue", "tab:gray", "tab:blue"]
    fig, (runs, batches) = figure(2, figsize=(13, 4.5))
    bars = runs.bar(labels, [report["rows_per_second"][n] for n in names], color=colors)
    runs.bar_label(bars, fmt="%.0f")
    runs.set_ylabel("rows per second (median run)")
    runs.set_title(f"whole runs: QueueSink/plain x{report['queue_sink_over_plain_time_ratio']:.2f}, "
                   f"flowqueue/Delta x{report['flowqueue_over_delta_source_time_ratio']:.2f}", fontsize="medium")
    bars = batches.bar(labels, [report["median_batch_ms"][n]["triggerExecution"] for n in names], color=colors)
    batches.bar_label(bars, fmt="%.0f")
    batches.set_ylabel("median micro-batch (ms)")
    batches.set_title(f"batches: QueueSink/plain x{report['queue_sink_over_plain_batch_ratio']:.2f}, "
                      f"flowqueue/Delta x{report['flowqueue_over_delta_source_batch_ratio']:.2f}", fontsize="medium")
    for ax in (runs, batches):
        ax.tick_params(axis="x", labelsize="small")
    fig.suptitle(f"{report['rows']:,} rows in batches of {report['rows'] // report['batches_per_run']['queue_sink']:,}",
                 fontsize="medium")
    return fig


if __name__ == "__main__":
    main()
