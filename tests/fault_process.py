"""A producer, a consumer or a flow controller in its own Spark application, for the kill -9
trials of test_faults.py.

``python fault_process.py producer QUEUE CHECKPOINT SOURCE_DIR CAPACITY``
    Streams the JSON files of SOURCE_DIR (``id BIGINT, producer STRING``, two files per batch)
    into QUEUE through ``QueueSink`` (availableNow: it exits 0 once every file is enqueued).
``python fault_process.py consumer QUEUE CHECKPOINT OUTPUT STOP_MARKER MAX_RECORDS``
    Streams the queue's default subscription into the Delta table OUTPUT (idempotent through
    its checkpoint) until the file STOP_MARKER exists, then stops the query and exits 0.
``python fault_process.py controller HOME CHECKPOINT``
    Runs the flow controller of HOME (a look every 300 ms) until killed.

Each restarts from its checkpoint when run again with the same arguments.
"""

from __future__ import annotations

import os
import sys
import time

from spark_flow import QueueSink, get_spark, read_queue
from spark_flow.controller import start_controller
from spark_flow.session import exit_process

CONF = {"spark.master": "local[1]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1",
        "spark.databricks.delta.snapshotPartitions": "1", "spark.default.parallelism": "1"}


def producer(queue: str, checkpoint: str, source: str, capacity: int) -> None:
    spark = get_spark(CONF)
    spark.sparkContext.setLogLevel("ERROR")
    messages = spark.readStream.schema("id BIGINT, producer STRING").option("maxFilesPerTrigger", 2).json(source)
    sink = QueueSink(queue, options={"capacity": capacity, "pollInterval": "200ms"})
    query = (messages.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    print(f"producer started {query.id}", flush=True)
    query.awaitTermination()
    print("producer done", flush=True)
    exit_process(0)


def consumer(queue: str, checkpoint: str, output: str, stop_marker: str, max_records: int) -> None:
    spark = get_spark(CONF)
    spark.sparkContext.setLogLevel("ERROR")
    query = (read_queue(spark, queue, maxRecordsPerTrigger=max_records).writeStream.format("delta")
             .option("checkpointLocation", checkpoint).trigger(processingTime="500 milliseconds").start(output))
    print(f"consumer started {query.id}", flush=True)
    while query.isActive and not os.path.exists(stop_marker):
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    print(f"consumer done {failure}", flush=True)
    exit_process(1 if failure else 0)


def controller(home: str, checkpoint: str) -> None:
    spark = get_spark(CONF)
    spark.sparkContext.setLogLevel("ERROR")
    query = start_controller(spark, home, checkpoint_location=checkpoint, trigger="300 milliseconds")
    print(f"controller started {query.id}", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "producer":
        producer(args[0], args[1], args[2], int(args[3]))
    elif role == "consumer":
        consumer(args[0], args[1], args[2], args[3], int(args[4]))
    elif role == "controller":
        controller(args[0], args[1])
    else:
        raise SystemExit(f"unknown role {role!r}: producer, consumer or controller")
