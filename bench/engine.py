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

Producers and consumers run ``--rounds`` times, the three side by side in each round, in an order
turned by one each round (a run's place among the others moves its time: the machine's load, the
JVM's compilation); a ratio is taken within its round, and the report's is the median of the
rounds' (one round's swung by half between runs here).

Prints and writes JSON, and a PNG of the times (beside the JSON).

    .venv/bin/python bench/engine.py [--looks 20] [--batches 10] [--batch 1000] [--rounds 3] [--out bench/engine.json]
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
#: Each round's runs: Delta's own, then spark-flow in each store.
RUNS = ["delta", *STORES]


def main() -> None:
    options = parser(__doc__, "bench/engine.json")
    options.add_argument("--looks", type=int, default=20, help="gate looks timed in each store")
    options.add_argument("--batches", type=int, default=10, help="micro-batches of each producer run")
    options.add_argument("--batch", type=int, default=1000, help="messages a micro-batch")
    options.add_argument("--rounds", type=int, default=3, help="producer and consumer runs of each kind")
    args = options.parse_args()
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-"))
    source = str(base / "source")
    (spark.range(args.batches * args.batch).selectExpr("id", "concat('m', id) AS body")
     .repartition(args.batches).write.format("delta").save(source))

    looks = {store: gate_look(spark, base / f"looks-{store}", store, args.looks) for store in STORES}
    produced: dict[str, list[float]] = {name: [] for name in RUNS}
    consumed: dict[str, list[float]] = {name: [] for name in RUNS}
    for round_ in range(args.rounds):
        order = RUNS[round_ % len(RUNS):] + RUNS[:round_ % len(RUNS)]
        for name in order:
            store = None if name == "delta" else name
            produced[name].append(produce(spark, source, base / f"{round_}-queue-{name}", store))
        for name in order:
            store = None if name == "delta" else name
            consumed[name].append(consume(spark, base / f"{round_}-queue-{name}", base / f"{round_}-out-{name}", store))
    report = {"benchmark": "engine", "machine": at_start, "messages": args.batches * args.batch,
              "messages_per_batch": args.batch, "rounds": args.rounds,
              "gate_look_median_seconds": {store: round(statistics.median(times), 4) for store, times in looks.items()},
              **timed("producer", produced), **timed("consumer", consumed)}
    print(report)
    write_report(args.out, report, chart(report))
    exit_process(0)  # as jobs end: the engine's acknowledging listener removed before the session stops


def timed(kind: str, seconds: dict[str, list[float]]) -> dict[str, Any]:
    """The report's entries for ``kind``'s runs: each run's seconds, their median, and each
    store's median ratio to Delta's run of the same round."""
    ratios = {store: [mine / delta for mine, delta in zip(seconds[store], seconds["delta"], strict=True)]
              for store in STORES}
    return {f"{kind}_runs_seconds": {name: [round(s, 2) for s in runs] for name, runs in seconds.items()},
            f"{kind}_seconds": {name: round(statistics.median(runs), 2) for name, runs in seconds.items()},
            f"{kind}_ratio_to_delta": {store: round(statistics.median(r), 2) for store, r in ratios.items()},
            f"{kind}_ratios_by_round": {store: [round(x, 2) for x in r] for store, r in ratios.items()}}


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
    names = RUNS
    width = 0.4
    for offset, kind in ((-width / 2, "producer"), (width / 2, "consumer")):
        seconds = [report[f"{kind}_seconds"][name] for name in names]
        placed = runs.bar([i + offset for i in range(len(names))], seconds, width, label=kind)
        runs.bar_label(placed, labels=[f"{s:.1f} s" for s in seconds])
    runs.set_xticks(range(len(names)), ["Delta's own", "deltalake", "engine"])
    runs.set_ylabel("seconds")
    runs.set_title(f"{report['messages']:,} messages, {report['messages_per_batch']:,} a batch "
                   f"(median of {report['rounds']} rounds)")
    runs.legend()
    return fig


if __name__ == "__main__":
    main()
