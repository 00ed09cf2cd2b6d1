"""A consumer or a flow controller in its own Spark application, for the kill -9 trials of
test_faults.py (their producer is the producer job).

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
from pathlib import Path

from spark_flow import get_spark, read_queue
from spark_flow.controller.query import start_controller
from spark_flow.spark.session import exit_process

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobs"))  # as pytest's pythonpath
from _common import local_conf

CONF = local_conf(1)


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
    if role == "consumer":
        consumer(args[0], args[1], args[2], args[3], int(args[4]))
    elif role == "controller":
        controller(args[0], args[1])
    else:
        raise SystemExit(f"unknown role {role!r}: consumer or controller")
