"""Scaling: depth cost against history length, and the capacity bound with producer processes.

(a) Depth cost. Three queues whose history holds 10^3, 10^5 and 10^6 consumed (acknowledged)
messages, written fast with deltalake in 10, 100 and 500 commits carrying the sink's
``userMetadata``. For each: ``Queue(path)`` + ``depths()`` on a fresh handle (cold: the handle
loads the Delta log), then, after a few new unconsumed commits, ``depths()`` on the warm handle
(it reads only the new commits). Medians of ``--repeats`` runs and the 10^6 / 10^3 ratios: flat
means the depth does not cost the messages already consumed.

(b) Capacity bound. 1, 2 and 4 producer *processes* (the producer job, jobs/producer.py, each
its own local[1] Spark application under spark-submit) stream a rate source through
``QueueSink`` with ``capacity`` into one queue with ``stopCount``; nothing consumes. Each producer may add at most one capacity window
after the queue went flow-stopped, so the depth never exceeds stop + the sum of the capacities.
The parent samples ``Queue.depths()`` every 0.25 s until every producer has enqueued, the queue
is flow-stopped and the depth has not moved for ``--settle`` seconds, then kills every child
process group.

Writes bench/scaling.json and bench/scaling.png.

    .venv/bin/python bench/scaling.py [--repeats 5] [--producers 1,2,4] [--rate 100] [--capacity 50]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _report import figure, local_conf, machine, parser, start_job, write_report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SCHEMA = "id BIGINT, body STRING"
#: The producer job's messages (--source rate): the schema of the queues of part (b).
MESSAGE_SCHEMA = "id BIGINT, producer STRING, event_time TIMESTAMP, body STRING"
HISTORY = {1_000: 10, 100_000: 100, 1_000_000: 500}  # consumed messages: commits that hold them
NEW_COMMITS, NEW_ROWS = 3, 100


def append_commits(path: str, commits: int, rows: int, first_id: int = 0) -> None:
    """Append ``commits`` commits of ``rows`` messages, with the sink's count and size metadata."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    from spark_flow.rules.depth import METADATA_KEY

    for i in range(commits):
        start = first_id + i * rows
        table = pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                          "body": pa.array([f"m{n:09d}" for n in range(start, start + rows)], pa.string())})
        metadata = json.dumps({METADATA_KEY: {"count": rows, "size": rows * (8 + 10), "producer": "bench"}})
        write_deltalake(path, table, mode="append",
                        commit_properties=CommitProperties(custom_metadata={"userMetadata": metadata}))


def timed(fn: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    value = fn()
    return time.perf_counter() - began, value


def depth_cost(base: Path, repeats: int) -> dict[str, Any]:
    """Part (a): cold and warm ``depths()`` against the number of consumed messages."""
    from spark_flow import Queue

    results: dict[str, Any] = {}
    append_commits(str(base / f"history_{min(HISTORY)}"), 1, 1)  # warm-up: imports, first reads (not timed)
    Queue(str(base / f"history_{min(HISTORY)}")).depths()
    for messages, commits in HISTORY.items():
        path = str(base / f"history_{messages}")
        built, _ = timed(lambda p=path, c=commits, m=messages: append_commits(p, c, m // c))
        setup = Queue(path)
        latest = setup.refresh()
        setup.acknowledge("default", latest)  # every message so far is consumed
        cold_open, cold_depths, warm = [], [], []
        new_id = messages
        for _ in range(repeats):
            opened, handle = timed(lambda p=path: Queue(p))
            seconds, depths = timed(handle.depths)
            assert depths["default"].count == 0, depths
            cold_open.append(opened)
            cold_depths.append(seconds)
            append_commits(path, NEW_COMMITS, NEW_ROWS, new_id)  # new, unconsumed messages
            new_id += NEW_COMMITS * NEW_ROWS
            reads = handle.ledger.reads
            seconds, depths = timed(handle.depths)
            assert depths["default"].count == NEW_COMMITS * NEW_ROWS, depths
            warm.append(seconds)
            warm_reads = handle.ledger.reads - reads
            handle.acknowledge("default", handle.refresh())  # consumed again for the next round
        results[str(messages)] = {
            "consumed_messages": messages, "commits": commits + 1, "build_seconds": round(built, 2),
            "cold_open_ms": round(statistics.median(cold_open) * 1000, 2),
            "cold_depths_ms": round(statistics.median(cold_depths) * 1000, 2),
            "cold_total_ms": round(statistics.median(o + d for o, d in zip(cold_open, cold_depths, strict=True))
                                   * 1000, 2),
            "warm_depths_ms": round(statistics.median(warm) * 1000, 2),
            "warm_commit_infos_read": warm_reads,
        }
        print(f"history {messages}: {results[str(messages)]}", flush=True)
    small, large = results[str(min(HISTORY))], results[str(max(HISTORY))]
    ratios = {f"{key}_ratio_1e6_over_1e3": round(large[key] / small[key], 2)
              for key in ("cold_total_ms", "cold_depths_ms", "warm_depths_ms")}
    return {"by_consumed_messages": results, **ratios}


def producers_seen(path: str) -> dict[str, int]:
    """Commits per producer (the sink's ``txnAppId``) in the queue's log."""
    from deltalake import DeltaTable

    from spark_flow.rules.depth import METADATA_KEY

    seen: dict[str, int] = {}
    for info in DeltaTable(path).history():
        try:
            producer = json.loads(info.get("userMetadata") or "{}").get(METADATA_KEY, {}).get("producer")
        except (TypeError, ValueError, AttributeError):
            producer = None
        if producer:
            seen[producer] = seen.get(producer, 0) + 1
    return seen


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End a child and its JVM (its own process group), TERM first, then KILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # the JVM may outlive the Python parent of its group
        os.killpg(proc.pid, signal.SIGKILL)


def capacity_bound(spark: Any, base: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part (b): the max depth with n producer processes against stop + n x capacity."""
    from spark_flow import Queue, declare

    results = {}
    for n in args.producers:
        path = str(base / f"bound_{n}")
        declare(spark, path, MESSAGE_SCHEMA, settings={"stopCount": args.stop, "resumeCount": args.stop // 2})
        results[n] = {"path": path}
    spark.stop()  # the children need the cores
    out: dict[str, Any] = {}
    for n in args.producers:
        path = results[n]["path"]
        queue, procs, logs = Queue(path), [], []
        began = time.monotonic()
        try:
            for i in range(n):
                log = open(base / f"bound_{n}_p{i}.log", "wb")  # noqa: SIM115 - closed below
                logs.append(log)
                procs.append(start_job("producer", "--queue", path, "--name", f"p{i}", "--rate", str(args.rate),
                                       "--capacity", str(args.capacity), "--trigger", "1 second",
                                       "--checkpoint", str(base / f"cp_{n}_{i}"),
                                       conf={"spark.driver.memory": "512m"}, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True))
                time.sleep(1)  # Spark's package resolution does not like to start at the same instant
            max_depth, last_change, last_depth, seen, samples = 0, time.monotonic(), -1, {}, []
            stopped = False
            while time.monotonic() - began < args.timeout:
                depth = queue.depths()["default"].count
                samples.append((round(time.monotonic() - began, 2), depth))
                max_depth = max(max_depth, depth)
                if depth != last_depth:
                    last_depth, last_change = depth, time.monotonic()
                if len(samples) % 4 == 0:
                    seen, stopped = producers_seen(path), queue.subscriptions.get("default").flow_stopped
                    # done: every producer enqueued, the queue is flow-stopped, and nobody adds more
                    if len(seen) == n and stopped and time.monotonic() - last_change >= args.settle:
                        break
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"a producer process exited: see {base}/bound_{n}_p*.log")
                time.sleep(0.25)
        finally:
            for proc in procs:
                kill_group(proc)
            for log in logs:
                log.close()
        sub = queue.subscriptions.get("default")
        bound = args.stop + n * args.capacity
        out[str(n)] = {"producers": n, "producers_that_enqueued": len(seen), "commits_per_producer": seen,
                       "max_depth": max_depth, "final_depth": queue.depths()["default"].count, "bound": bound,
                       "max_over_bound": round(max_depth / bound, 3), "within_bound": max_depth <= bound,
                       "over_stop_per_producer": round((max_depth - args.stop) / n, 1),
                       "flow_stopped": sub.flow_stopped, "flow_stopped_count": sub.flow_stopped_count,
                       "seconds": round(time.monotonic() - began, 1), "samples": samples}
        print(f"{n} producers: {({k: v for k, v in out[str(n)].items() if k != 'samples'})}", flush=True)
    return out


def plot(report: dict[str, Any]) -> Figure:
    """Left: depth cost against consumed messages. Right: depth over time against the bounds."""
    fig, (left, right) = figure(2, figsize=(12, 4.5))
    if "depth_cost" in report:
        rows = report["depth_cost"]["by_consumed_messages"].values()
        x = [r["consumed_messages"] for r in rows]
        for key, label in (("cold_total_ms", "fresh handle: open + depths()"),
                           ("warm_depths_ms", f"warm handle, {NEW_COMMITS} new commits: depths()")):
            left.plot(x, [r[key] for r in rows], marker="o", label=label)
        left.set_xscale("log")
        left.set_ylim(bottom=0)
        left.set_xlabel("consumed messages in the queue's history")
        left.set_ylabel("ms (median)")
        left.set_title("depth cost vs history length")
        left.legend(fontsize="small")
    if "capacity_bound" in report:
        stop, capacity = report["settings"]["stop"], report["settings"]["capacity"]
        for n, result in report["capacity_bound"].items():
            line = right.plot([s[0] for s in result["samples"]], [s[1] for s in result["samples"]],
                              label=f"{n} producer(s), max {result['max_depth']}")
            right.axhline(stop + int(n) * capacity, color=line[0].get_color(), linestyle="--", alpha=0.7)
        right.axhline(stop, color="gray", linestyle=":", label=f"stopCount {stop}")
        right.set_xlabel("seconds since the first producer process started")
        right.set_ylabel("depth (messages)")
        right.set_title(f"depth vs stop + n x capacity ({capacity}), dashed")
        right.set_ylim(bottom=0)
        right.legend(fontsize="small")
    return fig


def main() -> None:
    options = parser(__doc__, "bench/scaling.json")
    options.add_argument("--repeats", type=int, default=5, help="timing repeats per history length")
    options.add_argument("--producers", default="1,2,4", help="producer process counts to run")
    options.add_argument("--rate", type=int, default=100, help="rows per second of each producer's rate source")
    options.add_argument("--capacity", type=int, default=50, help="each producer's capacity window")
    options.add_argument("--stop", type=int, default=100, help="the queue's stopCount")
    options.add_argument("--settle", type=float, default=8.0, help="seconds without a depth change that end a run")
    options.add_argument("--timeout", type=float, default=150.0, help="longest run of one producer count, seconds")
    options.add_argument("--parts", default="depth,bound", help="depth, bound or both")
    args = options.parse_args()
    args.producers = [int(n) for n in args.producers.split(",")]
    report: dict[str, Any] = {"machine": machine(),
                              "settings": {"stop": args.stop, "capacity": args.capacity, "rate": args.rate,
                                           "repeats": args.repeats, "new_commits": NEW_COMMITS,
                                           "new_rows": NEW_ROWS, "history_commits": HISTORY}}
    from spark_flow import declare, get_spark

    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-scaling-"))
    spark = get_spark(local_conf(1))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        parts = args.parts.split(",")
        if "depth" in parts:
            for messages in HISTORY:
                declare(spark, str(base / f"history_{messages}"), SCHEMA)
            report["depth_cost"] = depth_cost(base, args.repeats)
        if "bound" in parts:
            report["capacity_bound"] = capacity_bound(spark, base, args)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    chart = plot(report)
    samples = {n: r.pop("samples") for n, r in report.get("capacity_bound", {}).items()}  # depth over time
    write_report(args.out, report, chart, samples=samples)


if __name__ == "__main__":
    main()
