"""Flow control in query progress: the listener reports producers and consumers of a queue."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from support.streams import start_consumer, start_producer, wait_until

from spark_flow.spark.declare import declare
from spark_flow.spark.listener import FlowProgress, FlowProgressListener


def test_listener_reports_depth_flow_state_and_time_held(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, producer STRING", settings={"stopCount": 20, "resumeCount": 10})
    listener = FlowProgressListener(queues=[path])
    spark.streams.addListener(listener)
    producer, _ = start_producer(spark, path, tmp_path / "p", "p", 40, options={"capacity": 10})
    wait_until(lambda: queue.subscriptions.get("default").flow_stopped, 90)
    consumer = start_consumer(spark, path, tmp_path / "c", tmp_path / "out", maxRecordsPerTrigger=10)

    def reports(role: str) -> list[FlowProgress]:
        return [f for flows in list(listener.progress.values()) for f in flows if f.role == role]

    try:
        wait_until(lambda: any(f.held_seconds >= 1 for f in reports("producer")), 180)
        wait_until(lambda: bool(reports("consumer")), 60)
    finally:
        producer.stop()
        consumer.stop()
        spark.streams.removeListener(listener)
    held = next(f for f in reports("producer") if f.held_seconds >= 1)
    assert held.queue == "q" and held.query_id == str(producer.id) and held.flow_stopped_count >= 1
    assert held.count > 0, "the messages the held batch enqueued"
    assert not held.flow_stopped, "a held batch completes once the queue is flow-OFF"
    assert held.depth_count <= 20, "flow-OFF: the depth is not above stop"
    consumed = reports("consumer")[-1]
    assert (consumed.queue, consumed.subscription, consumed.query_id) == ("q", "default", str(consumer.id))
    assert consumed.flow_stopped_count >= 1
