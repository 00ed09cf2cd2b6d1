"""Flow control under a bursty producer: no control vs Spark's static rate limit vs spark-flow,
on/off and paced.

One deterministic workload, run four times in one Spark session, one variant after the other:

- a feeder appends ``--bursts`` bursts of ``--burst-rows`` rows to a Delta *source* table, one
  burst every ``--period`` seconds (``--rows-per-file`` rows per Parquet file, ``event_time`` =
  the burst's write time, a 100-byte body: every message is 116 bytes as the sink counts it);
- a producer streams the source table into a queue table (processing-time trigger, 1 s);
- a consumer reads the queue with the ``flowqueue`` source (same settings in every variant, so
  only the producer side differs) and is slower than the bursts: each row costs
  ``--row-cost-ms`` of processing, then the batch is appended to an output table.

Variants:

- ``no_control``: plain Delta streaming write into the queue (a queue without thresholds).
- ``rate_limit``: the same with ``maxFilesPerTrigger`` on the producer's source, tuned to the
  consumer's mean rate as measured in ``no_control`` (Spark's static answer to a slow consumer).
- ``spark_flow``: ``QueueSink`` with ``capacity``, queue with ``stopCount`` / ``resumeCount``.
- ``spark_flow_paced``: the same, the queue declared with ``pacing`` (admitted at the drain rate).

Every ~0.5 s the run samples: rows fed to the source, rows written to the queue (from its Delta
log), rows the consumer has written out, and ``Queue.depths()``. Reported per variant:

- backlog = rows written to the queue - rows the consumer has output (the same measure for every
  variant; bytes = rows x 116), max and mean over the samples; for spark-flow also the depth from
  ``Queue.depths()`` (messages after the acknowledged position, so it also counts a batch that is
  done but not yet acknowledged);
- consumer idle fraction = of the samples where the producer had data pending (rows in the
  source not yet in the queue), the fraction where the consumer had nothing to do (backlog 0);
  also the same counted only from the producer's first write on (its start-up lag left out),
  and for spark-flow the same over the samples where the producer was flow-stopped (a held
  producer must not starve its consumer);
- producer throughput = rows / (last queue commit - first burst), consumer throughput likewise;
- end-to-end latency p50/p95/p99 = consumer write time - ``event_time``, per row;
- flowStoppedCount of the spark-flow queue's subscription.

Writes bench/flow_control.json and bench/flow_control.png (backlog curves with the stop threshold
and the stop + capacity bound).

    .venv/bin/python bench/flow_control.py [--bursts 5] [--burst-rows 300] [--period 4]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report import SlowConsumer, figure, local_conf, machine, parser, write_report
from pyspark.sql import DataFrame, SparkSession

from spark_flow import Queue, QueueSink, declare, get_spark, read_queue

BODY_BYTES = 100
MESSAGE_BYTES = 8 + 8 + BODY_BYTES  # id BIGINT, event_time TIMESTAMP, body STRING (as the sink sizes it)
SCHEMA = "id BIGINT, event_time TIMESTAMP, body STRING"
VARIANTS = ("no_control", "rate_limit", "spark_flow", "spark_flow_paced")

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Sample:
    """One look at a variant's pipeline, ``t`` seconds after its first burst."""

    t: float
    fed: int
    written: int
    consumed: int
    depth_count: int
    depth_size: int
    flow_stopped: bool

    @property
    def backlog(self) -> int:
        return self.written - self.consumed

    @property
    def pending(self) -> int:
        return self.fed - self.written


class Consumer(SlowConsumer):
    """The slow consumer (jobs/_common.py's): ``row_cost`` seconds of work per row, then the batch
    appended to a Delta table exactly once; each row's latency taken when its batch is written."""

    def __init__(self, output: str, row_cost: float) -> None:
        super().__init__(output, row_cost)
        self.latencies_ms: list[float] = []
        self._event_us: list[int] = []

    def read(self, batch: DataFrame) -> int:
        import pyarrow as pa

        events = batch.select("event_time").toArrow().column("event_time")
        self._event_us = events.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
        return len(self._event_us)

    def written(self, batch_id: int, rows: int) -> None:
        now_us = int(time.time() * 1_000_000)
        self.latencies_ms.extend((now_us - e) / 1000 for e in self._event_us)


class Feeder(threading.Thread):
    """Appends the bursts to the source table on a fixed schedule (the same for every variant)."""

    def __init__(self, spark: SparkSession, source: str, args: argparse.Namespace, start: float) -> None:
        super().__init__(daemon=True)
        self.spark, self.source, self.args, self.start_at = spark, source, args, start
        self.fed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        args = self.args
        try:
            for i in range(args.bursts):
                time.sleep(max(0.0, self.start_at + i * args.period - time.time()))
                files = max(1, args.burst_rows // args.rows_per_file)
                (self.spark.range(i * args.burst_rows, (i + 1) * args.burst_rows, numPartitions=files)
                 .selectExpr("id", "current_timestamp() AS event_time", f"repeat('x', {BODY_BYTES}) AS body")
                 .write.format("delta").mode("append").save(self.source))
                self.fed += args.burst_rows
        except BaseException as error:  # reported by the main thread
            self.error = error


def total_written(ledger: Any) -> tuple[int, float | None]:
    """Rows in every commit of the queue so far, and the time (s) of the last commit that added rows."""
    ledger.refresh()
    commits = [c for c in ledger.commits(-1) if c.count]
    return sum(c.count for c in commits), (max(c.timestamp for c in commits) / 1000 if commits else None)


def run_variant(spark: SparkSession, name: str, base: Path, args: argparse.Namespace,
                files_per_trigger: int | None) -> dict[str, Any]:
    """Run one variant end to end; return its samples and summary."""
    from spark_flow.store.ledger import Ledger
    from spark_flow.store.table import open_table

    root = base / name
    source, queue_path, output = str(root / "source"), str(root / "queue"), str(root / "output")
    spark.createDataFrame([], SCHEMA).write.format("delta").save(source)
    flow = name.startswith("spark_flow")
    settings = ({"stopCount": args.stop, "resumeCount": args.resume, "pacing": name == "spark_flow_paced"}
                if flow else {})
    declare(spark, queue_path, SCHEMA, settings=settings)
    reader = spark.readStream.format("delta")
    if files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    stream = reader.load(source)
    if flow:
        writer = stream.writeStream.foreachBatch(QueueSink(queue_path, options={"capacity": args.capacity}))
    else:
        writer = stream.writeStream.format("delta")
    producer = (writer.option("checkpointLocation", str(root / "cp_producer")).queryName(f"{name}_producer")
                .trigger(processingTime="1 second").start(*([] if flow else [queue_path])))
    consumer_fn = Consumer(output, args.row_cost_ms / 1000)
    consumer = (read_queue(spark, queue_path, maxRecordsPerTrigger=args.consumer_batch).writeStream
                .foreachBatch(consumer_fn).option("checkpointLocation", str(root / "cp_consumer"))
                .queryName(f"{name}_consumer").trigger(processingTime="250 milliseconds").start())
    time.sleep(3)  # both queries started and idle before the first burst
    ledger = Ledger(open_table(queue_path))
    watcher = Queue(queue_path)
    total = args.bursts * args.burst_rows
    start = time.time() + 0.5
    feeder = Feeder(spark, source, args, start)
    feeder.start()
    samples: list[Sample] = []
    last_commit: float | None = None
    try:
        while True:
            time.sleep(max(0.0, start + len(samples) * args.sample - time.time()))
            written, last_commit = total_written(ledger)
            depth = watcher.depths()["default"]
            sub = watcher.subscriptions.get("default")
            samples.append(Sample(round(time.time() - start, 3), feeder.fed, written, consumer_fn.consumed,
                                  depth.count, depth.size, sub.flow_stopped))
            if feeder.error is not None:
                raise RuntimeError("feeder failed") from feeder.error
            for query in (producer, consumer):
                if query.exception() is not None:
                    raise RuntimeError(f"{query.name} failed: {query.exception()}")
            if consumer_fn.consumed >= total or time.time() - start > args.timeout:
                break
        triggers = [p["durationMs"]["triggerExecution"] / 1000 for p in producer.recentProgress
                    if p["numInputRows"] and "triggerExecution" in p["durationMs"]]
    finally:
        consumer.stop()
        producer.stop()
        feeder.join(timeout=30)
    finished = time.time() - start
    sub = watcher.subscriptions.get("default")
    summary = summarize(name, samples, consumer_fn, start, last_commit, total, finished, sub.flow_stopped_count,
                        files_per_trigger, args)
    summary["producer_trigger_seconds_mean"] = round(statistics.fmean(triggers), 2) if triggers else None
    return {**summary, "samples": [asdict(s) for s in samples]}


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of ``values``."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def summarize(name: str, samples: list[Sample], consumer: Consumer, start: float, last_commit: float | None,
              total: int, finished: float, flow_stopped_count: int, files_per_trigger: int | None,
              args: argparse.Namespace) -> dict[str, Any]:
    """The variant's numbers from its samples and its consumer."""
    backlog = [s.backlog for s in samples]
    pending = [s for s in samples if s.pending > 0]
    starved = [s for s in pending if s.backlog == 0]
    # the same once the producer has written its first rows (its query's start-up lag left out)
    running = [s for s in pending if s.t >= next((x.t for x in samples if x.written), math.inf)]
    consumer_done = next((s.t for s in samples if s.consumed >= total), None)
    producer_seconds = (last_commit - start) if last_commit else None
    summary: dict[str, Any] = {
        "variant": name,
        "rows_total": total,
        "rows_written": samples[-1].written if samples else 0,
        "rows_consumed": consumer.consumed,
        "completed": consumer.consumed >= total,
        "seconds": round(finished, 2),
        "backlog_max_count": max(backlog, default=0),
        "backlog_mean_count": round(statistics.fmean(backlog), 1) if backlog else 0,
        "backlog_max_bytes": max(backlog, default=0) * MESSAGE_BYTES,
        "backlog_mean_bytes": round(statistics.fmean(backlog) * MESSAGE_BYTES) if backlog else 0,
        "depth_max_count": max((s.depth_count for s in samples), default=0),
        "pending_at_producer_max": max((s.pending for s in samples), default=0),
        "samples": len(samples),
        "samples_producer_pending": len(pending),
        "samples_consumer_starved": len(starved),
        "consumer_idle_fraction": round(len(starved) / len(pending), 3) if pending else 0.0,
        "consumer_idle_fraction_after_first_write": (round(sum(s.backlog == 0 for s in running) / len(running), 3)
                                                      if running else 0.0),
        "producer_rows_per_second": round(total / producer_seconds, 1) if producer_seconds else None,
        "consumer_rows_per_second": round(total / consumer_done, 1) if consumer_done else None,
        "latency_ms": {f"p{q}": round(percentile(consumer.latencies_ms, q) or 0) for q in (50, 95, 99)},
        "consumer_batches": consumer.batches,
    }
    if name.startswith("spark_flow"):
        held = [s for s in samples if s.flow_stopped]
        summary.update({"depth_max_size": max((s.depth_size for s in samples), default=0),
                        "samples_producer_held": len(held),
                        "consumer_idle_fraction_while_held": (round(sum(s.backlog == 0 for s in held) / len(held), 3)
                                                              if held else 0.0),
                        "flow_stopped_count": flow_stopped_count, "stop_count": args.stop,
                        "resume_count": args.resume, "capacity": args.capacity,
                        "bound_stop_plus_capacity": args.stop + args.capacity})
    if files_per_trigger is not None:
        summary["max_files_per_trigger"] = files_per_trigger
        summary["rate_limit_rows_per_trigger"] = files_per_trigger * args.rows_per_file
    return summary


def plot(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> Figure:
    """Backlog over time of the variants, with the stop threshold and the stop + capacity bound."""
    fig, ax = figure()
    colors = {"no_control": "tab:red", "rate_limit": "tab:orange", "spark_flow": "tab:blue",
              "spark_flow_paced": "tab:green"}
    for name, result in results.items():
        samples = result["samples"]
        ax.plot([s["t"] for s in samples], [s["written"] - s["consumed"] for s in samples],
                color=colors[name], label=f"{name} backlog")
        if name.startswith("spark_flow"):
            ax.plot([s["t"] for s in samples], [s["depth_count"] for s in samples], color=colors[name],
                    linestyle=":", label=f"{name} Queue.depths()")
    ax.axhline(args.stop, color="gray", linestyle="--", label=f"stopCount {args.stop}")
    ax.axhline(args.stop + args.capacity, color="black", linestyle="--",
               label=f"stop + capacity {args.stop + args.capacity}")
    for i in range(args.bursts):
        ax.axvline(i * args.period, color="gray", alpha=0.15, lw=1)
    ax.set_xlabel("seconds since the first burst (grey lines: bursts)")
    ax.set_ylabel("backlog (messages written to the queue, not yet consumed)")
    ax.set_title(f"{args.bursts} bursts of {args.burst_rows} rows every {args.period:g}s, "
                 f"consumer {args.row_cost_ms:g} ms/row")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize="small")
    return fig


def main() -> None:
    options = parser(__doc__, "bench/flow_control.json")
    options.add_argument("--bursts", type=int, default=5)
    options.add_argument("--burst-rows", type=int, default=300)
    options.add_argument("--period", type=float, default=4.0, help="seconds between bursts")
    options.add_argument("--rows-per-file", type=int, default=25, help="rows per source Parquet file")
    options.add_argument("--row-cost-ms", type=float, default=25.0, help="consumer processing cost per row")
    options.add_argument("--consumer-batch", type=int, default=100, help="consumer maxRecordsPerTrigger")
    options.add_argument("--stop", type=int, default=300, help="spark-flow stopCount")
    options.add_argument("--resume", type=int, default=150, help="spark-flow resumeCount")
    options.add_argument("--capacity", type=int, default=200, help="spark-flow producer capacity")
    options.add_argument("--files-per-trigger", type=int, help="rate_limit maxFilesPerTrigger "
                        "(default: the consumer's rate measured in no_control)")
    options.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    options.add_argument("--timeout", type=float, default=100.0, help="longest run of one variant, seconds")
    options.add_argument("--variants", default=",".join(VARIANTS))
    args = options.parse_args()
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-flow-"))
    results: dict[str, dict[str, Any]] = {}
    files_per_trigger = args.files_per_trigger
    try:
        for name in args.variants.split(","):
            if name == "rate_limit" and files_per_trigger is None:
                # rows per producer trigger = the consumer's rate x the producer's trigger period
                # (1 s, or longer when its batches take longer), both as measured in no_control.
                measured = results.get("no_control", {})
                rate = measured.get("consumer_rows_per_second") or 1000 / args.row_cost_ms
                period = max(1.0, measured.get("producer_trigger_seconds_mean") or 1.0)
                files_per_trigger = max(1, round(rate * period / args.rows_per_file))
            began = time.time()
            results[name] = run_variant(spark, name, base, args, files_per_trigger if name == "rate_limit" else None)
            brief = {k: v for k, v in results[name].items() if k != "samples"}
            print(f"{name} ({time.time() - began:.0f}s): {json.dumps(brief)}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    summaries = {k: {kk: vv for kk, vv in v.items() if kk != "samples"} for k, v in results.items()}
    report = {"machine": at_start,
              "workload": {k: v for k, v in vars(args).items() if k not in ("out", "variants")},
              "message_bytes": MESSAGE_BYTES, "results": summaries}
    write_report(args.out, report, plot(results, args), samples={k: v["samples"] for k, v in results.items()})


if __name__ == "__main__":
    main()
