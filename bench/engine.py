"""The two stores side by side in one run (docs/design.md 2.10): what reading and writing through
the engine (``spark.flow.io=engine``, governed compute) costs against ``deltalake`` in this Python.

- The median time of one gate look (``Gate.step``: the queue's log caught up, its
  subscriptions, settings and depth), ``--looks`` times in each store, on one queue, each one
  that reads (a second apart: ``FRESH_FOR``).
- A producer: the same stream (a Delta source table, ``--batch`` messages a micro-batch, ``--batches``
  batches) written by ``QueueSink`` in each store, and by Delta's plain streaming sink; the
  whole run's seconds and their ratios to Delta's.
- A consumer: the queue read to its end with ``read_queue`` (the ``flowqueue`` source with
  deltalake; Delta's change feed source, acknowledged from the driver, with the engine) into a
  Delta table, and by Delta's plain source; the whole run's seconds and the ratios.

Prints and writes JSON, and a PNG of the times (beside the JSON).

    .venv/bin/python bench/engine.py [--looks 20] [--batches 10] [--batch 1000] [--out bench/engine.json]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import figure, local_conf, machine, parser, write_report

from spark_flow import QueueSink, declare, get_spark, read_queue
from spark_flow.flow.gate import Gate
from spark_flow.flow.queue import Queue
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.spark.session import exit_process
from spark_flow.store.engine_history import FRESH_FOR

STORES = ("deltalake", "engine")


def main() -> None:
    options = parser(__doc__, "bench/engine.json")
    options.add_argument("--looks", type=int, default=20, help="gate looks timed in each store")
    options.add_argument("--batches", type=int, default=10, help="micro-batches of each producer run")
    options.add_argument("--batch", type=int, default=1000, help="messages a micro-batch")
    args = options.parse_args()
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-"))
    source = str(base / "source")
    (spark.range(args.batches * args.batch).selectExpr("id", "concat('m', id) AS body")
     .repartition(args.batches).write.format("delta").save(source))

    looks = {store: gate_look(spark, base / f"looks-{store}", store, args.looks) for store in STORES}
    produced = {"delta": produce(spark, source, base / "plain", None)}
    for store in STORES:
        produced[store] = produce(spark, source, base / f"queue-{store}", store)
    consumed = {"delta": consume(spark, base / "plain", base / "plain-out", None)}
    for store in STORES:
        consumed[store] = consume(spark, base / f"queue-{store}", base / f"out-{store}", store)
    report = {"benchmark": "engine", "machine": at_start, "messages": args.batches * args.batch,
              "messages_per_batch": args.batch,
              "gate_look_median_seconds": {store: round(statistics.median(times), 4) for store, times in looks.items()},
              "producer_seconds": {name: round(seconds, 2) for name, seconds in produced.items()},
              "producer_ratio_to_delta": {store: round(produced[store] / produced["delta"], 2) for store in STORES},
              "consumer_seconds": {name: round(seconds, 2) for name, seconds in consumed.items()},
              "consumer_ratio_to_delta": {store: round(consumed[store] / consumed["delta"], 2) for store in STORES}}
    print(report)
    write_report(args.out, report, chart(report))
    exit_process(0)  # as jobs end: the engine's acknowledging listener removed before the session stops


def gate_look(spark: Any, path: Path, store: str, looks: int) -> list[float]:
    """Seconds of each gate look at a queue of a few commits, through ``store``: each a look that
    reads the queue's tables (the engine answers a look within ``FRESH_FOR`` of another from that
    one's reads, so the looks here are that far apart)."""
    declare(spark, str(path), "id BIGINT, body STRING", settings={"stopCount": 1_000_000})
    spark.range(10).selectExpr("id", "'x' AS body").write.format("delta").mode("append").save(str(path))
    gate = Gate(Queue(str(path), {IO_OPTION: store}))
    gate.step()
    times = []
    for _ in range(looks):
        time.sleep(FRESH_FOR)
        started = time.perf_counter()
        gate.step()
        times.append(time.perf_counter() - started)
    return times


def produce(spark: Any, source: str, path: Path, store: str | None) -> float:
    """Seconds to write every file of ``source``, one a batch: through ``QueueSink`` in
    ``store``, or Delta's plain sink (None)."""
    reader = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
    started = time.perf_counter()
    if store is None:
        query = reader.writeStream.format("delta").option("checkpointLocation", f"{path}_cp").trigger(
            availableNow=True).start(str(path))
    else:
        declare(spark, str(path), "id BIGINT, body STRING")
        query = reader.writeStream.foreachBatch(QueueSink(str(path), options={IO_OPTION: store})).option(
            "checkpointLocation", f"{path}_cp").trigger(availableNow=True).start()
    query.awaitTermination()
    return time.perf_counter() - started


def consume(spark: Any, queue: Path, out: Path, store: str | None) -> float:
    """Seconds to read ``queue`` to its end into a Delta table: ``read_queue`` in ``store``, or
    Delta's plain source (None)."""
    started = time.perf_counter()
    if store is None:
        frame = spark.readStream.format("delta").load(str(queue))
    else:
        spark.conf.set(IO_OPTION, store)
        frame = read_queue(spark, str(queue))
    query = frame.writeStream.format("delta").option("checkpointLocation", f"{out}_cp").trigger(
        availableNow=True).start(str(out))
    query.awaitTermination()
    spark.conf.unset(IO_OPTION)
    return time.perf_counter() - started


def chart(report: dict[str, Any]) -> Any:
    """A gate look's median in each store; producer and consumer runs against Delta's own."""
    fig, (look, runs) = figure(2, (12, 5))
    medians = report["gate_look_median_seconds"]
    bars = look.bar(list(medians), [seconds * 1000 for seconds in medians.values()])
    look.bar_label(bars, labels=[f"{seconds * 1000:.1f} ms" for seconds in medians.values()])
    look.set_ylabel("milliseconds")
    look.set_title("one gate look that reads (median)")
    names = ["delta", *STORES]
    width = 0.4
    for offset, kind in ((-width / 2, "producer"), (width / 2, "consumer")):
        seconds = [report[f"{kind}_seconds"][name] for name in names]
        placed = runs.bar([i + offset for i in range(len(names))], seconds, width, label=kind)
        runs.bar_label(placed, labels=[f"{s:.1f} s" for s in seconds])
    runs.set_xticks(range(len(names)), ["Delta's own", "deltalake", "engine"])
    runs.set_ylabel("seconds")
    runs.set_title(f"{report['messages']:,} messages, {report['messages_per_batch']:,} a batch")
    runs.legend()
    return fig


if __name__ == "__main__":
    main()
