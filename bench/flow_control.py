"""Flow control under bursty producers and a consumer whose speed changes: no control vs Spark's
static rate limit vs spark-flow, on/off and paced; for one producer and for three of unequal
speed.

One deterministic workload per shape, run four times in one Spark session, one variant after
the other (issue 48: side by side in one run):

- a feeder appends a burst to each producer's Delta *source* table every ``--period`` seconds
  for ``--seconds`` (``--rows-per-file`` rows per Parquet file, ``event_time`` = the burst's
  write time, a 100-byte body: every message is 116 bytes as the sink counts it). Shape ``one``:
  one producer, bursts of ``--burst-rows``; shape ``three``: three producers, bursts of
  ``--three-burst-rows`` (unequal, the same rows in all: the same offered load);
- each producer streams its source table into the queue table (processing-time trigger, 1 s);
- a consumer reads the queue with the ``flowqueue`` source (the same settings in every variant,
  so only the producers differ): each message costs ``--row-cost-ms`` of processing for the first
  half of the run and ``--slow-cost-ms`` for the second, then the batch is appended to an output
  table. The bursts offer more than the consumer drains at either speed, so data always waits
  somewhere (at the producers or in the queue) and the consumer never needs to wait; the
  slowest of three producers offers more than a third of the faster speed, so all three have
  data throughout.

Variants:

- ``no_control``: plain Delta streaming writes into the queue (a queue without thresholds).
- ``rate_limit``: the same with ``maxFilesPerTrigger`` on each producer's source, tuned to the
  consumer's mean rate as measured in ``no_control``, divided between the producers (Spark's
  static answer to a slow consumer).
- ``spark_flow``: ``QueueSink`` with ``capacity``, queue with ``stopCount`` / ``resumeCount``.
- ``spark_flow_paced``: the same, the queue declared with ``pacing`` (admitted at the drain rate,
  shared equally between the producers that write).

Every ``--sample`` seconds the run samples: rows fed to each source, rows each producer has
written to the queue (for spark-flow, the queue's commits, which name their producer; for the
plain writers, their queries' progress, as a query listener counts it: a plain batch is written
at once), rows written to the queue in all (its Delta log), rows the consumer has written out,
and ``Queue.depths()``. A 20-second run of ``no_control`` comes first, not reported (the
session's first queries start slower). Reported per shape and variant:

- backlog = rows written to the queue - rows the consumer has output (the same measure for every
  variant; bytes = rows x 116), max and mean over the samples; for spark-flow also the depth from
  ``Queue.depths()`` (messages after the acknowledged position, so it also counts a batch that is
  done but not yet acknowledged);
- consumer idle fraction = of the samples where a producer had data pending (rows in its source
  not yet in the queue), the fraction where the consumer had nothing to do (backlog 0); the same
  from the producers' first write on (their start-up lag left out), and for spark-flow over the
  samples where the producers were flow-stopped (a held producer must not starve its consumer);
- per half of the run (the consumer's two speeds) and over the whole run: each producer's
  admitted messages a second while all of them had data pending, their spread (largest over
  smallest: 1.0 is equal shares), the consumer's rate;
- end-to-end latency p50/p95/p99 = consumer write time - ``event_time``, per message consumed;
- flowStoppedCount of the spark-flow queue's subscription.

Writes bench/flow_control.json and bench/flow_control.png (per shape and variant: backlog and
depth against the stop threshold and stop + capacity; admitted and drain rates).

    .venv/bin/python bench/flow_control.py [--seconds 180] [--shapes one,three]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report import SlowConsumer, figure, local_conf, machine, parser, write_report
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from spark_flow import Queue, QueueSink, declare, get_spark, read_queue

BODY_BYTES = 100
MESSAGE_BYTES = 8 + 8 + BODY_BYTES  # id BIGINT, event_time TIMESTAMP, body STRING (as the sink sizes it)
SCHEMA = "id BIGINT, event_time TIMESTAMP, body STRING"
VARIANTS = ("no_control", "rate_limit", "spark_flow", "spark_flow_paced")
RATE_WINDOW = 10.0  # seconds over which the plot's rates are taken
PRODUCER_COLORS = ("tab:blue", "tab:orange", "tab:red")

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
    )


@dataclass
class Sample:
    """One look at a variant's pipeline, ``t`` seconds after its first burst; ``fed`` and
    ``admitted`` per producer."""

    t: float
    fed: list[int]
    admitted: list[int]
    written: int
    consumed: int
    depth_count: int
    depth_size: int
    flow_stopped: bool

    @property
    def backlog(self) -> int:
        return self.written - self.consumed

    @property
    def pending(self) -> list[int]:
        return [fed - admitted for fed, admitted in zip(self.fed, self.admitted, strict=True)]


class Consumer(SlowConsumer):
    """The slow consumer (jobs/_common.py's): ``row_cost`` seconds of work a message until
    ``slow_at`` (time.time()), ``slow_cost`` after, then the batch appended to a Delta table
    exactly once; each message's latency taken when its batch is written."""

    def __init__(self, output: str, row_cost: float, slow_cost: float, slow_at: float) -> None:
        super().__init__(output, row_cost)
        self.slow_cost, self.slow_at = slow_cost, slow_at
        self.latencies_ms: list[float] = []
        self._event_us: list[int] = []

    def read(self, batch: DataFrame) -> int:
        import pyarrow as pa

        if time.time() >= self.slow_at:
            self.seconds_per_row = self.slow_cost
        events = batch.select("event_time").toArrow().column("event_time")
        self._event_us = events.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
        return len(self._event_us)

    def written(self, batch_id: int, rows: int) -> None:
        now_us = int(time.time() * 1_000_000)
        self.latencies_ms.extend((now_us - e) / 1000 for e in self._event_us)


class Progress(StreamingQueryListener):
    """Input rows of each query's batches so far, by query name: what a plain Delta writer has
    written (its batch at once; a paced or held ``QueueSink`` batch ends long after its first
    writes, so its commits are counted instead)."""

    def __init__(self) -> None:
        self.rows: Counter[str] = Counter()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        self.rows[event.progress.name or ""] += event.progress.numInputRows

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass


class Feeder(threading.Thread):
    """Appends the bursts to the sources on a fixed schedule (the same for every variant)."""

    def __init__(self, spark: SparkSession, sources: list[str], burst_rows: list[int], args: argparse.Namespace,
                 start: float) -> None:
        super().__init__(daemon=True)
        self.spark, self.sources, self.burst_rows, self.args, self.start_at = spark, sources, burst_rows, args, start
        self.fed = [0] * len(sources)
        self.error: BaseException | None = None

    def run(self) -> None:
        args = self.args
        try:
            for i in range(math.ceil(args.seconds / args.period)):
                time.sleep(max(0.0, self.start_at + i * args.period - time.time()))
                for p, (source, rows) in enumerate(zip(self.sources, self.burst_rows, strict=True)):
                    (self.spark.range(i * rows, (i + 1) * rows, numPartitions=max(1, rows // args.rows_per_file))
                     .selectExpr("id", "current_timestamp() AS event_time", f"repeat('x', {BODY_BYTES}) AS body")
                     .write.format("delta").mode("append").save(source))
                    self.fed[p] += rows
        except BaseException as error:  # reported by the main thread
            self.error = error


def written_by(ledger: Any, app_ids: list[str]) -> tuple[int, list[int]]:
    """Messages in every commit of the queue so far, and in those of each of ``app_ids`` (a
    ``QueueSink``'s commits name their producer)."""
    ledger.refresh()
    total, by_app = 0, Counter[str]()
    for commit in ledger.commits(-1):
        total += commit.count
        by_app[commit.producer or ""] += commit.count
    return total, [by_app[app_id] for app_id in app_ids]


def run_variant(spark: SparkSession, progress: Progress, shape: str, name: str, burst_rows: list[int], base: Path,
                args: argparse.Namespace, files_per_trigger: int | None) -> dict[str, Any]:
    """Run one variant of one shape for ``args.seconds``; return its samples and summary."""
    from spark_flow.store.ledger import Ledger
    from spark_flow.store.table import open_table

    root = base / shape / name
    queue_path, output = str(root / "queue"), str(root / "output")
    flow = name.startswith("spark_flow")
    settings = ({"stopCount": args.stop, "resumeCount": args.resume, "pacing": name == "spark_flow_paced"}
                if flow else {})
    declare(spark, queue_path, SCHEMA, settings=settings)
    sources, producers = [], []
    for p in range(len(burst_rows)):
        source = str(root / f"source{p}")
        sources.append(source)
        spark.createDataFrame([], SCHEMA).write.format("delta").save(source)
        reader = spark.readStream.format("delta")
        if files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", files_per_trigger)
        stream = reader.load(source)
        if flow:
            writer = stream.writeStream.foreachBatch(QueueSink(queue_path, options={"capacity": args.capacity}))
        else:
            writer = stream.writeStream.format("delta")
        producers.append(writer.option("checkpointLocation", str(root / f"cp_producer{p}"))
                         .queryName(f"{shape}_{name}_producer{p}").trigger(processingTime="1 second")
                         .start(*([] if flow else [queue_path])))
    start = time.time() + 3  # the queries started and idle before the first burst
    consumer_fn = Consumer(output, args.row_cost_ms / 1000, args.slow_cost_ms / 1000, start + args.seconds / 2)
    consumer = (read_queue(spark, queue_path, maxRecordsPerTrigger=args.consumer_batch).writeStream
                .foreachBatch(consumer_fn).option("checkpointLocation", str(root / "cp_consumer"))
                .queryName(f"{shape}_{name}_consumer").trigger(processingTime="250 milliseconds").start())
    ledger = Ledger(open_table(queue_path))
    watcher = Queue(queue_path)
    feeder = Feeder(spark, sources, burst_rows, args, start)
    feeder.start()
    samples: list[Sample] = []
    try:
        while time.time() < start + args.seconds:
            time.sleep(max(0.0, start + len(samples) * args.sample - time.time()))
            written, by_producer = written_by(ledger, [f"spark-flow/{q.id}" for q in producers])
            admitted = by_producer if flow else [progress.rows[q.name or ""] for q in producers]
            depth = watcher.depths()["default"]
            samples.append(Sample(round(time.time() - start, 3), list(feeder.fed), admitted, written,
                                  consumer_fn.consumed, depth.count, depth.size,
                                  watcher.subscriptions.get("default").flow_stopped))
            if feeder.error is not None:
                raise RuntimeError("feeder failed") from feeder.error
            for query in (*producers, consumer):
                if query.exception() is not None:
                    raise RuntimeError(f"{query.name} failed: {query.exception()}")
        triggers = [p["durationMs"]["triggerExecution"] / 1000 for q in producers for p in q.recentProgress
                    if p["numInputRows"] and "triggerExecution" in p["durationMs"]]
    finally:
        for query in (consumer, *producers):
            query.stop()
        feeder.join(timeout=60)
    sub = watcher.subscriptions.get("default")
    summary = summarize(shape, name, samples, consumer_fn, sub.flow_stopped_count, files_per_trigger, args)
    summary["producer_trigger_seconds_mean"] = round(statistics.fmean(triggers), 2) if triggers else None
    return {**summary, "samples": [asdict(s) for s in samples]}


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of ``values``."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def while_all_pending(samples: list[Sample]) -> dict[str, Any]:
    """Each producer's admitted messages a second over ``samples`` while all of them had data
    pending (between two samples that both saw it), their spread, the consumer's rate."""
    admitted, seconds = [0] * len(samples[0].fed), 0.0
    for a, b in itertools.pairwise(samples):
        if min(a.pending) > 0 and min(b.pending) > 0:
            admitted = [n + y - x for n, x, y in zip(admitted, a.admitted, b.admitted, strict=True)]
            seconds += b.t - a.t
    rates = [round(n / seconds, 1) for n in admitted] if seconds else []
    return {"seconds_all_pending": round(seconds, 1), "producer_rates_all_pending": rates,
            "share_spread": round(max(rates) / min(rates), 2) if rates and min(rates) > 0 else None,
            "consumer_rate": round((samples[-1].consumed - samples[0].consumed) / (samples[-1].t - samples[0].t), 1)}


def summarize(shape: str, name: str, samples: list[Sample], consumer: Consumer, flow_stopped_count: int,
              files_per_trigger: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """The variant's numbers from its samples and its consumer."""
    backlog = [s.backlog for s in samples]
    pending = [s for s in samples if max(s.pending) > 0]
    starved = [s for s in pending if s.backlog == 0]
    # the same once every producer has written its first rows (the queries' start-up lag left out)
    running = [s for s in pending if s.t >= next((x.t for x in samples if min(x.admitted)), math.inf)]
    summary: dict[str, Any] = {
        "shape": shape,
        "variant": name,
        "rows_fed": sum(samples[-1].fed),
        "rows_written": samples[-1].written,
        "rows_consumed": consumer.consumed,
        "backlog_max_count": max(backlog),
        "backlog_mean_count": round(statistics.fmean(backlog), 1),
        "backlog_max_bytes": max(backlog) * MESSAGE_BYTES,
        "backlog_mean_bytes": round(statistics.fmean(backlog) * MESSAGE_BYTES),
        "depth_max_count": max(s.depth_count for s in samples),
        "pending_at_producers_max": max(sum(s.pending) for s in samples),
        "samples_taken": len(samples),
        "samples_producer_pending": len(pending),
        "samples_consumer_starved": len(starved),
        "consumer_idle_fraction": round(len(starved) / len(pending), 4) if pending else 0.0,
        "consumer_idle_fraction_after_first_write": (round(sum(s.backlog == 0 for s in running) / len(running), 4)
                                                      if running else 0.0),
        "first_half": while_all_pending([s for s in samples if s.t < args.seconds / 2]),
        "second_half": while_all_pending([s for s in samples if s.t >= args.seconds / 2]),
        "whole_run": while_all_pending(samples),
        "latency_ms": {f"p{q}": round(percentile(consumer.latencies_ms, q) or 0) for q in (50, 95, 99)},
        "consumer_batches": consumer.batches,
    }
    if name.startswith("spark_flow"):
        held = [s for s in samples if s.flow_stopped]
        summary.update({"depth_max_size": max(s.depth_size for s in samples),
                        "samples_producer_held": len(held),
                        "consumer_idle_fraction_while_held": (round(sum(s.backlog == 0 for s in held) / len(held), 4)
                                                              if held else 0.0),
                        "flow_stopped_count": flow_stopped_count, "stop_count": args.stop,
                        "resume_count": args.resume, "capacity": args.capacity,
                        "bound_stop_plus_capacity": args.stop + args.capacity})
    if files_per_trigger is not None:
        summary["max_files_per_trigger"] = files_per_trigger
        summary["rate_limit_rows_per_trigger"] = files_per_trigger * args.rows_per_file
    return summary


def windowed_rates(times: list[float], totals: list[int]) -> tuple[list[float], list[float]]:
    """Messages a second over the last :data:`RATE_WINDOW` seconds, at each time from the window's end on."""
    out: tuple[list[float], list[float]] = ([], [])
    first = 0
    for i, now in enumerate(times):
        while now - times[first] > RATE_WINDOW:
            first += 1
        if now - times[first] >= RATE_WINDOW * 0.9:
            out[0].append(now)
            out[1].append((totals[i] - totals[first]) / (now - times[first]))
    return out


def plot(results: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace) -> Figure:
    """Per shape (a row) and variant (a column): the backlog (and spark-flow's depth) against
    the stop threshold and the stop + capacity bound; each producer's admitted rate and the
    consumer's drain rate."""
    shapes = list(results)
    fig, axes = figure(len(VARIANTS), figsize=(4.2 * len(VARIANTS), 3.6 * len(shapes)), nrows=len(shapes))
    for row, shape in enumerate(shapes):
        for col, name in enumerate(VARIANTS):
            ax = axes[row][col] if len(shapes) > 1 else axes[col]
            if name not in results[shape]:
                ax.set_visible(False)
                continue
            samples = results[shape][name]["samples"]
            times = [s["t"] for s in samples]
            ax.plot(times, [s["written"] - s["consumed"] for s in samples], color="black", label="backlog")
            if name.startswith("spark_flow"):
                ax.plot(times, [s["depth_count"] for s in samples], color="black", linestyle=":", lw=0.8,
                        label="Queue.depths()")
                ax.axhline(args.stop, color="gray", linestyle="--", lw=0.8, label=f"stopCount {args.stop}")
                ax.axhline(args.stop + args.capacity, color="tab:red", linestyle="--", lw=0.8,
                           label=f"stop + capacity {args.stop + args.capacity}")
            ax.axvline(args.seconds / 2, color="gray", alpha=0.3)
            top = max(s["written"] - s["consumed"] for s in samples)
            ax.set_ylim(0, max(top, (args.stop + args.capacity) if name.startswith("spark_flow") else 0) * 1.15)
            ax.set_title(f"{shape} producer{'s' if shape != 'one' else ''}: {name}", fontsize="medium")
            ax.set_xlabel("seconds (consumer slower after the grey line)")
            if col == 0:
                ax.set_ylabel("messages in the queue")
            ax.legend(loc="upper left", fontsize="x-small")
            flows = ax.twinx()
            for p in range(len(samples[0]["admitted"])):
                flows.plot(*windowed_rates(times, [s["admitted"][p] for s in samples]), color=PRODUCER_COLORS[p],
                           lw=0.9, label=f"producer {p} admitted")
            flows.plot(*windowed_rates(times, [s["consumed"] for s in samples]), color="tab:green", lw=1.6, label="drain")
            flows.set_ylim(0, 100)
            if col == len(VARIANTS) - 1:
                flows.set_ylabel(f"messages/s ({RATE_WINDOW:g} s window)")
            flows.legend(loc="upper right", fontsize="x-small")
    return fig


def tuned_files(measured: dict[str, Any], producers: int, args: argparse.Namespace) -> int:
    """``rate_limit``'s ``maxFilesPerTrigger`` for each of ``producers``: the consumer's mean rate
    over the run times the producers' trigger period (1 s, or longer when their batches take
    longer), both as measured in ``no_control``, divided between the producers."""
    consumed, seconds = measured.get("rows_consumed"), args.seconds
    rate = consumed / seconds if consumed else 1000 / args.row_cost_ms
    period = max(1.0, measured.get("producer_trigger_seconds_mean") or 1.0)
    return max(1, round(rate * period / producers / args.rows_per_file))


def main() -> None:
    options = parser(__doc__, "bench/flow_control.json")
    options.add_argument("--seconds", type=float, default=180.0, help="length of each variant's run")
    options.add_argument("--period", type=float, default=4.0, help="seconds between bursts")
    options.add_argument("--burst-rows", type=int, default=200, help="shape one: rows of a burst")
    options.add_argument("--three-burst-rows", type=int, nargs=3, default=[90, 60, 50],
                         help="shape three: rows of a burst, per producer")
    options.add_argument("--rows-per-file", type=int, default=5, help="rows per source Parquet file")
    options.add_argument("--row-cost-ms", type=float, default=10.0, help="consumer cost per message, first half")
    options.add_argument("--slow-cost-ms", type=float, default=80.0, help="consumer cost per message, second half")
    options.add_argument("--consumer-batch", type=int, default=100, help="consumer maxRecordsPerTrigger")
    options.add_argument("--stop", type=int, default=300, help="spark-flow stopCount")
    options.add_argument("--resume", type=int, default=150, help="spark-flow resumeCount")
    options.add_argument("--capacity", type=int, default=200, help="spark-flow producer capacity")
    options.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    options.add_argument("--shapes", default="one,three")
    options.add_argument("--variants", default=",".join(VARIANTS))
    args = options.parse_args()
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    progress = Progress()
    spark.streams.addListener(progress)
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-flow-"))
    shapes = {"one": [args.burst_rows], "three": args.three_burst_rows}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        run_variant(spark, progress, "warm_up", "no_control", shapes["one"], base,
                    argparse.Namespace(**{**vars(args), "seconds": 20.0}), None)
        for shape in args.shapes.split(","):
            results[shape] = {}
            for name in args.variants.split(","):
                files = tuned_files(results[shape].get("no_control", {}), len(shapes[shape]), args)
                began = time.time()
                results[shape][name] = run_variant(spark, progress, shape, name, shapes[shape], base, args,
                                                   files if name == "rate_limit" else None)
                brief = {k: v for k, v in results[shape][name].items() if k != "samples"}
                print(f"{shape} {name} ({time.time() - began:.0f}s): {json.dumps(brief)}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    summaries = {shape: {k: {kk: vv for kk, vv in v.items() if kk != "samples"} for k, v in variants.items()}
                 for shape, variants in results.items()}
    report = {"machine": at_start,
              "workload": {k: v for k, v in vars(args).items() if k not in ("out", "shapes", "variants")},
              "message_bytes": MESSAGE_BYTES, "results": summaries}
    write_report(args.out, report, plot(results, args),
                 samples={shape: {k: v["samples"] for k, v in variants.items()} for shape, variants in results.items()})


if __name__ == "__main__":
    main()
