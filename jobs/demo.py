"""Quickstart demo: a producer faster than its consumer, held back by flow control.

A rate source produces 100 messages a second into a Delta queue (stop 300, resume 150, producer
capacity 200); a slow consumer takes at most 40 messages a second. Every second the demo prints the queue's
depth and flow state: the producer is flow-stopped when the depth passes 300 and goes on when
the consumer has brought it under 150. At the end: a summary and a plot of the run.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from spark_flow import QueueSink, declare, get_spark, read_queue
from spark_flow.plot import Sample, plot_depth

STOP, RESUME, CAPACITY = 300, 150, 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="where the demo's tables go (default: a new temporary directory)")
    parser.add_argument("--seconds", type=float, default=45, help="how long the producer runs")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="spark-flow-demo-")).resolve()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_flow.gate").setLevel(logging.INFO)
    logging.getLogger("py4j").setLevel(logging.CRITICAL)  # a producer stopped mid-write is expected here

    spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    path = str(base / "queues" / "events")
    queue = declare(spark, path, "id BIGINT, body STRING",
                    settings={"stopCount": STOP, "resumeCount": RESUME, "capacity": CAPACITY})
    print(f"queue {path}: stop {STOP}, resume {RESUME}; producer capacity {CAPACITY}")

    messages = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
                .selectExpr("value AS id", "concat('event-', value) AS body"))
    producer = (messages.writeStream.foreachBatch(QueueSink(path)).queryName("demo_producer")
                .option("checkpointLocation", str(base / "checkpoints" / "producer"))
                .trigger(processingTime="1 second").start())
    output = str(base / "consumed")
    consumer = (read_queue(spark, path, maxRecordsPerTrigger=40).writeStream.format("delta")
                .queryName("demo_consumer").option("checkpointLocation", str(base / "checkpoints" / "consumer"))
                .trigger(processingTime="1 second").start(output))

    samples: list[Sample] = []
    started = time.monotonic()
    while time.monotonic() - started < args.seconds or queue.depths()["default"].count > 0:
        elapsed = time.monotonic() - started
        if producer.isActive and elapsed >= args.seconds:
            print("stopping the producer; the consumer drains the queue")
            producer.stop()
        depth = queue.depths()["default"]
        sub = queue.subscriptions.get("default")
        samples.append(Sample(elapsed, depth.count, sub.flow_stopped))
        print(f"{elapsed:5.1f}s depth {depth.count:4d} messages  "
              f"{'PRODUCER HELD (flowStopped)' if sub.flow_stopped else 'flowing':28s} "
              f"flowStoppedCount {sub.flow_stopped_count}")
        time.sleep(1)
    producer.stop()
    consumer.stop()

    produced = spark.read.format("delta").load(path).count()
    consumed = spark.read.format("delta").load(output)
    unique = consumed.select("id").distinct().count()
    sub = queue.subscriptions.get("default")
    max_depth = max(s.depth for s in samples)
    chart = plot_depth(samples, queue.config().thresholds, base / "depth.png",
                       title=f"spark-flow demo: stop {STOP}, resume {RESUME}, capacity {CAPACITY}")
    print("\nsummary")
    print(f"  messages produced  {produced}")
    print(f"  messages consumed  {consumed.count()} ({unique} distinct)")
    print(f"  max depth seen     {max_depth} (bound: stop {STOP} + capacity {CAPACITY} = {STOP + CAPACITY})")
    print(f"  flowStoppedCount   {sub.flow_stopped_count}")
    print(f"  plot               {chart}")
    print(f"  tables             {base}")


if __name__ == "__main__":
    main()
