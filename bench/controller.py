"""Controller scaling: micro-batch time and CPU of the flow controller watching 1, 100, 1,000 and
5,000 queues, its state in 1, 2 and 8 partitions.

Queues are copies of one declared queue (3 messages enqueued, stop 2 / resume 1, so every queue
is flow-stopped, as its gate recorded), registered in one home per size (one registry commit
for them all); the controller then runs in this session (``local[2]``) and the median
``triggerExecution`` of its batches after the first is reported, with the time per queue and
the CPU seconds a batch took in every process of the run (the JVM, its Python workers, this
driver), the median of each phase Spark times (``durationMs``: ``latestOffset``,
``queryPlanning``, ``addBatch``, ...), and the first batch's time (a started controller opens
every queue). The controller keeps its state in ``STATE_PARTITIONS`` (2), set here to each
number compared; before, it had the session's ``spark.sql.shuffle.partitions`` (2 in the local
preset; a cluster's default is 200). Writes bench/controller.json and bench/controller.png.

    .venv/bin/python bench/controller.py [--sizes 1 100 1000 5000] [--state-partitions 1 2 8] [--batches 5]
        [--io deltalake|engine] [--driver-memory 4g]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _report import figure, local_conf, machine, parser, write_report

from spark_flow import declare, get_spark
from spark_flow.controller import query as controller
from spark_flow.flow.gate import Gate
from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.home import Registry
from spark_flow.rules.storage_options import IO_OPTION

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def copy_queue(template: Queue, path: str, name: str) -> None:
    """A copy of a declared queue, with its own name and subscriptions: the table directory
    (its ``_flow`` state inside) copied and its log's queue name and state location rewritten.
    Declaring 1,000 queues through Spark would take most of an hour on 2 cores, and deltalake
    refuses to write the ``flow.*`` properties itself."""
    shutil.copytree(template.path, path)
    for log in Path(path, "_delta_log").glob("*.json"):
        text = log.read_text().replace(template.path, path)
        log.write_text(text.replace(f'"flow.queueName":"{template.name}"', f'"flow.queueName":"{name}"'))
    for crc in Path(path, "_delta_log").glob("*.crc"):
        crc.unlink()


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and every process below it that is still
    running or was waited for (the session's JVM, its Python workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, used = {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(pid)] = int(fields[1])
        used[int(pid)] = sum(int(f) for f in fields[11:15]) / tick

    def below_me(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parents.get(pid, 1)
        return False

    return sum(seconds for pid, seconds in used.items() if below_me(pid))


def main() -> None:
    options = parser(__doc__, "bench/controller.json")
    options.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000, 5000])
    options.add_argument("--state-partitions", type=int, nargs="+", default=[1, 2, 8])
    options.add_argument("--batches", type=int, default=5, help="controller batches timed per size (after the first)")
    options.add_argument("--driver-memory", help="the session's heap (spark.driver.memory; Spark's default: 1g)")
    options.add_argument("--io", choices=["deltalake", "engine"], default="deltalake",
                         help="how the controller reads and writes the tables (spark.flow.io)")
    args = options.parse_args()
    report = {"machine": machine(), "io": args.io, "driver_memory": args.driver_memory or "1g", "results": {}}
    spark = get_spark({**local_conf(2), **({"spark.driver.memory": args.driver_memory} if args.driver_memory else {})})
    spark.sparkContext.setLogLevel("ERROR")
    template = declare(spark, str(Path(tempfile.mkdtemp(prefix="spark-flow-bench-template-")) / "template"),
                       "id BIGINT, body STRING", settings={"stopCount": 2, "resumeCount": 1})
    spark.range(3).selectExpr("id", "'m' AS body").write.format("delta").mode("append").save(template.path)
    Gate(template).step()  # held, as a gate records it: the copies' first look records no transition
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-controller-"))
    results = report["results"]
    for size in args.sizes:
        home = str(base / f"home{size}")
        began = time.perf_counter()
        queues = {f"queue{i}": str(base / f"q{size}" / f"queue{i}") for i in range(size)}
        for name, path in queues.items():
            copy_queue(template, path, name)
        Registry(home).register_all(queues)
        setup = time.perf_counter() - began
        results[size] = {"queues": size, "setup_seconds": round(setup, 1), "state_partitions": {}}
        for partitions in args.state_partitions:
            controller.STATE_PARTITIONS = partitions
            spark.conf.set(IO_OPTION, args.io)  # the queues were made with deltalake: the controller's way alone varies
            query = controller.start_controller(spark, home, trigger="100 milliseconds",
                                                checkpoint_location=str(base / f"checkpoint{size}-{partitions}"))
            while len(query.recentProgress) < 2 and query.isActive:
                time.sleep(0.05)
            first, cpu = len(query.recentProgress), cpu_seconds()
            while len(query.recentProgress) < first + args.batches and query.isActive:
                time.sleep(0.05)
            cpu, [opening, *progress] = cpu_seconds() - cpu, query.recentProgress
            timed = progress[first - 1:]
            query.stop()
            spark.conf.unset(IO_OPTION)
            durations = [p["durationMs"]["triggerExecution"] / 1000 for p in timed]
            median = statistics.median(durations)
            phases = {key: round(statistics.median(p["durationMs"].get(key, 0) for p in timed) / 1000, 3)
                      for key in timed[0]["durationMs"] if key != "triggerExecution"}
            results[size]["state_partitions"][partitions] = {
                "batch_seconds": durations, "median_batch_seconds": round(median, 3), "median_phase_seconds": phases,
                "first_batch_seconds": opening["durationMs"]["triggerExecution"] / 1000,
                "ms_per_queue": round(1000 * median / size, 2), "cpu_seconds_per_batch": round(cpu / len(timed), 2),
                "queues_flow_stopped_in_status": int(FlowAdmin(home).status()["flow_stopped"].sum())}
            print(json.dumps({"queues": size, "state_partitions": partitions, **results[size]["state_partitions"][partitions]}))
    write_report(args.out, report, plot(results))


def plot(results: dict[int, dict]) -> Figure:
    sizes = sorted(results)
    fig, (time_ax, cpu_ax) = figure(ncols=2, figsize=(11, 4))
    for partitions in results[sizes[0]]["state_partitions"]:
        runs = [results[s]["state_partitions"][partitions] for s in sizes]
        label = f"state in {partitions} partition{'s' if partitions > 1 else ''}"
        time_ax.plot(sizes, [r["median_batch_seconds"] for r in runs], marker="o", label=label)
        cpu_ax.plot(sizes, [r["cpu_seconds_per_batch"] for r in runs], marker="o", label=label)
    for ax, what in ((time_ax, "micro-batch (s, median)"), (cpu_ax, "CPU seconds a batch (all processes)")):
        ax.set_xscale("log")
        ax.set_xlabel("queues watched")
        ax.set_ylabel(what)
        ax.legend()
    fig.suptitle("flow controller on 2 cores: batch time and CPU against queues")
    return fig


if __name__ == "__main__":
    main()
