"""Message expiry (``messageTtl``): a subscription that lags loses what is too old, counted as
expired; a subscription that keeps up loses nothing; fresh messages are delivered."""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import SparkSession

from spark_flow.flow.gate import Gate
from spark_flow.spark.declare import declare
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue

SCHEMA = "id BIGINT, body STRING"


def read_all(spark: SparkSession, path: str, subscription: str, checkpoint: Path) -> list[int]:
    rows: list[int] = []
    query = (read_queue(spark, path, subscription=subscription).writeStream
             .foreachBatch(lambda batch, _id: rows.extend(r.id for r in batch.select("id").collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    return sorted(rows)


def test_a_lagging_subscription_loses_what_is_past_the_ttl_counted_a_current_one_nothing(
        spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"messageTtl": "6s"})
    queue.create_subscription("lagging", "earliest")
    QueueSink(path, app_id="load")(spark.range(5).selectExpr("id", "'old' AS body"), 0)
    assert read_all(spark, path, "default", tmp_path / "current") == [0, 1, 2, 3, 4]
    written = queue.ledger.commits(-1, queue.refresh())[-1].timestamp / 1000  # the newest write's
    time.sleep(max(0.0, written + 6.1 - time.time()))  # the TTL is the mechanism: let it pass

    status = Gate(queue).step()  # a producer's look expires what is due
    assert status.depths["lagging"].count == 0, "an expired message no longer counts in the depth"
    lagging, current = queue.subscriptions.get("lagging"), queue.subscriptions.get("default")
    assert (lagging.expired_count, current.expired_count) == (5, 0)

    QueueSink(path, app_id="load")(spark.range(5, 8).selectExpr("id", "'new' AS body"), 1)
    assert read_all(spark, path, "lagging", tmp_path / "lagging") == [5, 6, 7], "fresh messages are delivered"
    assert queue.subscriptions.get("lagging").expired_count == 5, "counted once"
