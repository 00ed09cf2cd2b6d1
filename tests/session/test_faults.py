"""Faults in one application: producers and acknowledgements racing for the queue's versions and
its subscriptions' rows (docs/design.md 3.3). The kill -9 trials of producer, consumer and
controller processes: tests/processes/test_faults.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from support.invariants import assert_flow_stopped_count_right

from spark_flow.flow.queue import Queue
from spark_flow.spark.declare import declare
from spark_flow.spark.sink import QueueSink

pytestmark = pytest.mark.timeout(900)
SCHEMA = "id BIGINT, producer STRING"


def test_concurrent_producers_and_acknowledgements_retry_and_lose_nothing(spark: SparkSession,
                                                                          tmp_path: Path) -> None:
    """Two producers (threads, one Spark application) append to one queue at the same time in
    chunks, their gates recording transitions, while two consumers acknowledge two subscriptions:
    Delta appends race for versions, subscription MERGEs (acks and compare-and-set transitions)
    conflict and are retried. Nothing is lost or doubled; each subscription's flowStoppedCount
    matches its history."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 25, "resumeCount": 10})
    queue.create_subscription("audit", "earliest")
    batches, rows = 2, 20
    done = threading.Event()
    errors: list[BaseException] = []

    def produce(name: str, offset: int) -> None:
        try:
            sink = QueueSink(path, options={"capacity": 10, "pollInterval": "100ms"}, app_id=f"concurrent-{name}")
            for batch in range(batches):
                first = offset + batch * rows
                sink(spark.range(first, first + rows).selectExpr("id", f"'{name}' AS producer"), batch)
        except BaseException as error:
            errors.append(error)

    def acknowledge(subscription: str, pause: float) -> None:
        """A consumer that acknowledges everything each time its subscription is flow-stopped
        (so the producers are held, and its MERGE races their gates' transitions)."""
        handle = Queue(path)  # its own handle, as a consumer process has
        try:
            while not done.is_set():
                if handle.subscriptions.get(subscription).flow_stopped:
                    time.sleep(pause)
                    handle.acknowledge(subscription, handle.refresh())
                time.sleep(0.05)
        except BaseException as error:
            errors.append(error)

    producers = [threading.Thread(target=produce, args=(n, o), daemon=True) for n, o in (("a", 0), ("b", 10_000))]
    consumers = [threading.Thread(target=acknowledge, args=(s, p), daemon=True)
                 for s, p in (("default", 0.2), ("audit", 0.5))]
    for thread in producers + consumers:
        thread.start()
    for thread in producers:
        thread.join(240)
    done.set()
    for thread in consumers:
        thread.join(30)
    assert not any(t.is_alive() for t in producers), "a producer is still held"
    assert not errors, errors

    ids = DeltaTable(path).to_pyarrow_table().column("id").to_pylist()
    expected = [o + i for o in (0, 10_000) for i in range(batches * rows)]
    assert sorted(ids) == expected, "every message enqueued exactly once"
    latest = queue.refresh()
    for name in ("default", "audit"):
        queue.acknowledge(name, latest)
    from spark_flow.flow.gate import Gate

    Gate(queue).step()  # records the final transitions to OFF
    total_stops = 0
    for name in ("default", "audit"):
        total_stops += assert_flow_stopped_count_right(queue, name)
        sub = queue.subscriptions.get(name)
        assert (sub.position, sub.flow_stopped) == (latest, False)
    assert total_stops >= 2, "the producers were held: transitions raced with acknowledgements"
