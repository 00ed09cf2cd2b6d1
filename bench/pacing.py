"""Pacing with several producers (issue 48): on/off flow control against a paced queue, side by
side in one Spark session, on the same workload:

- three producers of unequal speed (rate sources offering ``--rates`` messages a second, 1 s
  triggers, capacity ``--capacity``) write to one queue (``--stop`` / ``--resume``);
- one consumer (``maxRecordsPerTrigger`` 100) spends ``--row-cost-ms`` a message for the first
  half of the run and ``--slow-cost-ms`` for the second: a consumer whose speed changes halfway;
- every producer offers more than its share throughout, so all three always have data.

Every ``--sample`` seconds the run reads the queue's log (the messages each producer has written:
its commits' ``producer``), the depth, and the messages consumed. Reported per variant and per
half: each producer's admitted messages a second and the spread of the three (largest over
smallest: 1.0 is equal shares), the depth's max and mean, the consumer's idle fraction (samples
with nothing to read: every producer always has data), its rate, the end-to-end latency p50 / p99
(consumer's write time - the rate source's timestamp: the waiting at the source included), and
flowStoppedCount.

Writes bench/pacing.json and bench/pacing.png (depth and each producer's admitted rate over time).

    .venv/bin/python bench/pacing.py [--seconds 120]
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report import SlowConsumer, figure, local_conf, machine, parser, write_report
from pyspark.sql import DataFrame, SparkSession

from spark_flow import Queue, QueueSink, declare, get_spark, read_queue
from spark_flow.store.ledger import Ledger
from spark_flow.store.table import open_table

SCHEMA = "id BIGINT, event_time TIMESTAMP, producer STRING"
VARIANTS = ("spark_flow", "spark_flow_paced")

if TYPE_CHECKING:
    import argparse

    from matplotlib.figure import Figure


class Consumer(SlowConsumer):
    """The slow consumer, ``row_cost`` seconds a row until ``slow_at`` (time.time()), then ``slow_cost``;
    each row's latency taken when its batch is written."""

    def __init__(self, output: str, row_cost: float, slow_cost: float, slow_at: float) -> None:
        super().__init__(output, row_cost)
        self.slow_cost, self.slow_at = slow_cost, slow_at
        self.latencies_ms: list[tuple[float, float]] = []  # (when written, latency)
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
        self.latencies_ms.extend((now_us / 1e6, (now_us - e) / 1000) for e in self._event_us)


def written_by(ledger: Ledger, producers: Sequence[str]) -> list[int]:
    """The messages each of ``producers`` (app ids) has written to the queue so far (``ledger``:
    one that forgets nothing, read incrementally)."""
    ledger.refresh()
    totals = dict.fromkeys(producers, 0)
    for commit in ledger.commits(-1):
        if commit.producer in totals:
            totals[commit.producer] += commit.count
    return [totals[p] for p in producers]


def run_variant(spark: SparkSession, name: str, base: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one variant for ``args.seconds``; return its samples and summary."""
    root = base / name
    path = str(root / "queue")
    declare(spark, path, SCHEMA, settings={"stopCount": args.stop, "resumeCount": args.resume,
                                           "pacing": name == "spark_flow_paced"})
    start = time.time() + 3
    consumer_fn = Consumer(str(root / "output"), args.row_cost_ms / 1000, args.slow_cost_ms / 1000,
                           start + args.seconds / 2)
    producers, app_ids = [], []
    for i, rate in enumerate(args.rates):
        app_id = f"{name}-producer-{i}"
        app_ids.append(app_id)
        messages = (spark.readStream.format("rate").option("rowsPerSecond", rate).load()
                    .selectExpr("value AS id", "timestamp AS event_time", f"'p{i}' AS producer"))
        producers.append(messages.writeStream.foreachBatch(QueueSink(path, options={"capacity": args.capacity},
                                                                     app_id=app_id))
                         .option("checkpointLocation", str(root / f"cp_p{i}")).queryName(app_id)
                         .trigger(processingTime="1 second").start())
    consumer = (read_queue(spark, path, maxRecordsPerTrigger=100).writeStream.foreachBatch(consumer_fn)
                .option("checkpointLocation", str(root / "cp_consumer")).queryName(f"{name}_consumer")
                .trigger(processingTime="250 milliseconds").start())
    watcher, ledger = Queue(path), Ledger(open_table(path))
    samples: list[dict[str, Any]] = []
    try:
        while time.time() < start + args.seconds:
            time.sleep(max(0.0, start + len(samples) * args.sample - time.time()))
            depth = watcher.depths()["default"]
            samples.append({"t": round(time.time() - start, 3), "written": written_by(ledger, app_ids),
                            "consumed": consumer_fn.consumed, "depth": depth.count,
                            "flow_stopped": watcher.subscriptions.get("default").flow_stopped})
            for query in (*producers, consumer):
                if query.exception() is not None:
                    raise RuntimeError(f"{query.name} failed: {query.exception()}")
    finally:
        for query in (*producers, consumer):
            query.stop()
    flow_stopped_count = watcher.subscriptions.get("default").flow_stopped_count
    return {**summarize(name, samples, consumer_fn, start, flow_stopped_count, args), "samples": samples}


def summarize(name: str, samples: list[dict[str, Any]], consumer: Consumer, start: float, flow_stopped_count: int,
              args: argparse.Namespace) -> dict[str, Any]:
    """Per half of the run (the consumer's two speeds): each producer's rate, their spread, the
    depth, the consumer's idle fraction and rate; over the run: latency, flowStoppedCount."""
    counted = [s for s in samples if s["t"] >= 0]
    half = args.seconds / 2
    halves = {}
    for label, part in (("first_half", [s for s in counted if s["t"] < half]),
                        ("second_half", [s for s in counted if s["t"] >= half])):
        first, last = part[0], part[-1]
        seconds = last["t"] - first["t"]
        rates = [round((b - a) / seconds, 1) for a, b in zip(first["written"], last["written"], strict=True)]
        halves[label] = {
            "producer_rates": rates,
            "share_spread": round(max(rates) / min(rates), 2) if min(rates) > 0 else None,
            "consumer_rate": round((last["consumed"] - first["consumed"]) / seconds, 1),
            "depth_max": max(s["depth"] for s in part),
            "depth_mean": round(statistics.fmean(s["depth"] for s in part), 1),
            "consumer_idle_fraction": round(sum(s["depth"] == 0 for s in part) / len(part), 3),
        }
    latencies = sorted(latency for _, latency in consumer.latencies_ms)
    return {"variant": name, "offered_rates": args.rates, **halves,
            "depth_max": max(s["depth"] for s in counted),
            "latency_ms": {f"p{q}": round(latencies[min(len(latencies) - 1, int(q / 100 * len(latencies)))])
                           for q in (50, 99)} if latencies else None,
            "flow_stopped_count": flow_stopped_count, "stop_count": args.stop, "resume_count": args.resume,
            "capacity": args.capacity}


def plot(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> Figure:
    """Per variant: the depth, and each producer's admitted rate (a 5 s moving window)."""
    fig, axes = figure(len(results), figsize=(6 * len(results), 5))
    axes = axes if len(results) > 1 else [axes]
    for ax, (name, result) in zip(axes, results.items(), strict=True):
        samples = [s for s in result["samples"] if s["t"] >= 0]
        times = [s["t"] for s in samples]
        ax.plot(times, [s["depth"] for s in samples], color="black", label="depth")
        ax.axhline(args.stop, color="gray", linestyle="--", label=f"stopCount {args.stop}")
        rates = ax.twinx()
        step = max(1, round(5 / args.sample))
        for i, rate in enumerate(args.rates):
            window = [(b["t"], (b["written"][i] - a["written"][i]) / (b["t"] - a["t"]))
                      for a, b in zip(samples, samples[step:], strict=False)]
            rates.plot([t for t, _ in window], [r for _, r in window], label=f"producer {i} (offers {rate}/s)")
        rates.set_ylabel("admitted messages/s (5 s window)")
        rates.set_ylim(bottom=0)
        rates.legend(loc="upper right", fontsize="small")
        ax.axvline(args.seconds / 2, color="gray", alpha=0.3)
        ax.set_title(f"{name}: consumer {args.row_cost_ms:g} then {args.slow_cost_ms:g} ms/message")
        ax.set_xlabel("seconds")
        ax.set_ylabel("depth (messages)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize="small")
    return fig


def main() -> None:
    options = parser(__doc__, "bench/pacing.json")
    options.add_argument("--seconds", type=float, default=120.0, help="length of each variant's run")
    options.add_argument("--rates", type=int, nargs=3, default=[200, 80, 40], help="the producers' offered rates")
    options.add_argument("--row-cost-ms", type=float, default=12.5, help="consumer cost per message, first half")
    options.add_argument("--slow-cost-ms", type=float, default=25.0, help="consumer cost per message, second half")
    options.add_argument("--stop", type=int, default=300)
    options.add_argument("--resume", type=int, default=150)
    options.add_argument("--capacity", type=int, default=200)
    options.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    options.add_argument("--variants", default=",".join(VARIANTS))
    args = options.parse_args()
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-pacing-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in args.variants.split(","):
            began = time.time()
            results[name] = run_variant(spark, name, base, args)
            brief = {k: v for k, v in results[name].items() if k != "samples"}
            print(f"{name} ({time.time() - began:.0f}s): {brief}", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    report = {"machine": at_start, "workload": {k: v for k, v in vars(args).items() if k not in ("out", "variants")},
              "results": {k: {kk: vv for kk, vv in v.items() if kk != "samples"} for k, v in results.items()}}
    write_report(args.out, report, plot(results, args), samples={k: v["samples"] for k, v in results.items()})


if __name__ == "__main__":
    main()
