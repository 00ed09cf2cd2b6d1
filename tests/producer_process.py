"""A producer in its own Spark application: enqueues N batches of messages into a queue.

Run by tests/test_processes.py as ``python producer_process.py QUEUE NAME BATCHES ROWS``.
"""

from __future__ import annotations

import sys

from spark_flow import QueueSink, get_spark
from spark_flow.session import exit_process


def main(queue: str, name: str, batches: int, rows: int) -> None:
    spark = get_spark({"spark.master": "local[1]", "spark.ui.enabled": "false",
                       "spark.sql.shuffle.partitions": "1", "spark.databricks.delta.snapshotPartitions": "1"})
    spark.sparkContext.setLogLevel("ERROR")
    sink = QueueSink(queue, app_id=f"process-{name}")
    for batch_id in range(batches):
        sink(spark.range(batch_id * rows, (batch_id + 1) * rows).selectExpr("id", f"'{name}' AS producer"), batch_id)
    exit_process(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
