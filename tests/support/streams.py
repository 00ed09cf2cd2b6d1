"""Helpers for tests that run streaming queries: rate producers, waiting, draining."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.25) -> None:
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def rate_messages(spark: SparkSession, producer: str, rows_per_second: int) -> DataFrame:
    """A rate source shaped as queue messages ``id BIGINT, producer STRING``."""
    return (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
            .selectExpr("value AS id", f"'{producer}' AS producer"))


def start_producer(spark: SparkSession, queue: str, checkpoint: Path, producer: str, rows_per_second: int,
                   **sink_options: object) -> tuple[StreamingQuery, QueueSink]:
    sink = QueueSink(queue, **sink_options)  # type: ignore[arg-type]
    query = (rate_messages(spark, producer, rows_per_second).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="500 milliseconds").start())
    return query, sink


def start_consumer(spark: SparkSession, queue: str, checkpoint: Path, output: Path,
                   **options: object) -> StreamingQuery:
    """A consumer writing to a Delta table (idempotent through its checkpoint)."""
    return (read_queue(spark, queue, **options).writeStream.format("delta")
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="500 milliseconds")
            .start(str(output)))


def is_held(query: StreamingQuery) -> bool:
    """A producer is held when its current trigger stays active (the sink has not returned)."""
    return query.isActive and query.status["isTriggerActive"]


def drain(queue: Queue, timeout: float = 90.0) -> None:
    """Wait until every subscription of ``queue`` has acknowledged everything."""
    wait_until(lambda: all(d.count == 0 for d in queue.depths().values()), timeout)


def wait_for_looks(admin: FlowAdmin, queue: str, looks: int, timeout: float = 60.0) -> None:
    """Wait until the controller has looked at ``queue`` (written its status row) ``looks`` more
    times: a test that shows what many looks do not change waits for them, not for a time."""
    seen: set[object] = set()

    def looked() -> bool:
        seen.add(status_of(admin, queue).get("updated_at"))
        return len(seen) > looks

    wait_until(looked, timeout, interval=0.1)


def status_of(admin: FlowAdmin, queue: str, subscription: str = "default") -> dict[str, object]:
    """The controller's status row of ``queue``/``subscription``; empty while it has none."""
    frame = admin.status()
    rows = frame[(frame["queue"] == queue) & (frame["subscription"] == subscription)].to_dict("records")
    return rows[0] if rows else {}
