"""A producer stopped while its batch is held ends as a stop, not as a failure (issue 47): Spark
logs no error for it and ``query.exception()`` is None, with any logging configuration; the
batch is not committed, so its restart writes the rest of it, once."""

from __future__ import annotations

import threading
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.streams import wait_until

from spark_flow.flow.queue import Queue
from spark_flow.spark.declare import declare
from spark_flow.spark.sink import QueueSink

SCHEMA = "id BIGINT, body STRING"


def ids(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def test_a_producer_stopped_while_held_in_mid_batch_ends_as_a_stop_and_its_restart_writes_the_rest(
        spark: SparkSession, tmp_path: Path) -> None:
    """Stop 5 / resume 2, capacity 10, one batch of 30 messages and no consumer: the first chunk
    is written, then the batch is held. ``stop()`` ends the query with no error (on main it
    failed with HoldInterruptedError, which Spark logged at ERROR with its traceback); the
    restart, with a consumer acknowledging, writes the other 20 once."""
    path, source = str(tmp_path / "q"), str(tmp_path / "in")
    declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    spark.createDataFrame([(i, f"m{i}") for i in range(30)], SCHEMA).coalesce(1).write.format("delta").save(source)
    queue = Queue(path)

    def start() -> StreamingQuery:
        return (spark.readStream.format("delta").load(source).writeStream
                .foreachBatch(QueueSink(path, options={"capacity": 10, "pollInterval": "100ms"}))
                .option("checkpointLocation", str(tmp_path / "chk")).start())

    query = start()
    wait_until(lambda: queue.subscriptions.get("default").flow_stopped, 90)
    query.stop()
    assert query.exception() is None, query.exception()
    assert len(ids(path)) == 10, "the first chunk only"

    done = threading.Event()

    def acknowledge() -> None:
        while not done.is_set():
            queue.acknowledge("default", queue.refresh())
            done.wait(0.1)

    consumer = threading.Thread(target=acknowledge, daemon=True)
    consumer.start()
    try:
        restarted = start()
        restarted.processAllAvailable()
        restarted.stop()
    finally:
        done.set()
        consumer.join(10)
    assert restarted.exception() is None
    assert ids(path) == list(range(30))
