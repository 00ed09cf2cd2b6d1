"""Quickstart demo: a producer faster than its consumer, held back by flow control.

A rate source produces 100 messages a second (a batch of 100 each second) into a Delta queue
(stop 300, resume 150, producer capacity 200); a slow consumer spends 25 ms on each message (40
messages a second). Every second the demo prints the queue's depth and flow state: the producer
is flow-stopped when the depth passes 300 and goes on when the consumer has brought it under
150. The flow controller runs in the same session (embedded mode) and keeps the status and
history tables under <dir>/flow. At the end: a summary, and a plot of the run drawn from the
controller's history table.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from _common import SlowConsumer, local_conf

from spark_flow import FlowAdmin, QueueSink, declare, get_spark, read_queue, start_controller, stop_between_batches
from spark_flow.spark.session import session_storage_options

STOP, RESUME, CAPACITY = 300, 150, 200
CONSUMER_RATE = 40  # messages a second: the consumer works 25 ms on each


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="where the demo's tables go (default: a new temporary directory)")
    parser.add_argument("--seconds", type=float, default=45, help="how long the producer runs")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="spark-flow-demo-")).resolve()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_flow.flow.gate").setLevel(logging.INFO)
    logging.getLogger("py4j").setLevel(logging.CRITICAL)  # a producer stopped mid-write is expected here

    home = str(base / "flow")
    spark = get_spark({**local_conf(2), "spark.flow.home": home})
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.flow.home", home)  # also when the session existed already
    path = str(base / "queues" / "events")
    queue = declare(spark, path, "id BIGINT, body STRING",
                    settings={"stopCount": STOP, "resumeCount": RESUME})
    print(f"queue {path}: stop {STOP}, resume {RESUME}; producer capacity {CAPACITY}")
    controller = start_controller(spark, trigger="2 seconds")  # leaves the 2 cores to the queues
    admin = FlowAdmin(home, session_storage_options(spark))

    # 100 messages a trigger, one trigger a second: a held producer resumes with the next 100,
    # not with everything a time-based rate source would have made meanwhile.
    messages = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 100).load()
                .selectExpr("value AS id", "concat('event-', value) AS body"))
    producer = (messages.writeStream.foreachBatch(QueueSink(path, options={"capacity": CAPACITY}, query_name="demo_producer"))
                .queryName("demo_producer")
                .option("checkpointLocation", str(base / "checkpoints" / "producer"))
                .trigger(processingTime="1 second").start())
    output = str(base / "consumed")
    consumer = (read_queue(spark, path, maxRecordsPerTrigger=CAPACITY).writeStream
                .foreachBatch(SlowConsumer(output, 1 / CONSUMER_RATE, query_name="demo_consumer")).queryName("demo_consumer")
                .option("checkpointLocation", str(base / "checkpoints" / "consumer"))
                .trigger(processingTime="1 second").start())

    max_depth = 0
    started = time.monotonic()
    while time.monotonic() - started < args.seconds or queue.depths()["default"].count > 0:
        elapsed = time.monotonic() - started
        if producer.isActive and elapsed >= args.seconds:
            print("stopping the producer; the consumer drains the queue")
            producer.stop()
        depth = queue.depths()["default"]
        sub = queue.subscriptions.get("default")
        max_depth = max(max_depth, depth.count)
        print(f"{elapsed:5.1f}s depth {depth.count:4d} messages  "
              f"{'PRODUCER HELD (flowStopped)' if sub.flow_stopped else 'flowing':28s} "
              f"flowStoppedCount {sub.flow_stopped_count}")
        time.sleep(1)
    producer.stop()
    consumer.stop()
    time.sleep(2)  # a last controller look at the empty queue
    stop_between_batches(controller)

    produced = spark.read.format("delta").load(path).count()
    consumed = spark.read.format("delta").load(output)
    unique = consumed.select("id").distinct().count()
    sub = queue.subscriptions.get("default")
    chart = admin.plot("events", base / "depth.png")
    print("\nsummary")
    print(f"  messages produced  {produced}")
    print(f"  messages consumed  {consumed.count()} ({unique} distinct)")
    print(f"  max depth seen     {max_depth} (bound: stop {STOP} + capacity {CAPACITY} = {STOP + CAPACITY})")
    print(f"  flowStoppedCount   {sub.flow_stopped_count}")
    print(f"  plot               {chart}")
    print(f"  tables             {base}")
    print(f"  status             .venv/bin/spark-flow --home {home} status")


if __name__ == "__main__":
    main()
