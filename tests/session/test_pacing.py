"""A paced queue (issue 48) on real Spark: its producer is admitted at the rate its consumer
drains it, the depth steered to the middle of the band, and held at stop as without pacing.
The rules' arithmetic is tests/pure/test_pace.py's; how much better than on/off it flows is
bench/flow_control.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from support.docs import python_blocks
from support.streams import start_consumer, start_producer, wait_until

from spark_flow.flow.gate import Gate
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.rules.settings import producer_settings
from spark_flow.spark.declare import declare
from spark_flow.spark.sink import QueueSink

pytestmark = pytest.mark.timeout(300)

def settled(queue: Queue, polls: int = 12) -> int:
    """The depth once it has stood still for ``polls`` looks in a row, a quarter second apart
    (a paced producer may write again after that: its next write is due when the last is paid
    for at its pace)."""
    seen: list[int] = []

    def still() -> bool:
        seen.append(queue.depth().count)
        return len(seen) >= polls and len(set(seen[-polls:])) == 1

    wait_until(still, 120)
    return seen[-1]


def delivered(spark: SparkSession, output: Path) -> int:
    """The consumer's rows so far: none until its first commit (its sink makes the log's
    directory before it writes that commit)."""
    first_commit = output / "_delta_log" / f"{0:020}.json"
    return spark.read.format("delta").load(str(output)).count() if first_commit.exists() else 0


def test_a_paced_producer_waits_under_stop_for_its_consumer_and_follows_it(spark: SparkSession,
                                                                            tmp_path: Path) -> None:
    """A producer of 100 messages a second (capacity 1,000) into docs/configuration.md's paced
    queue (stop 200 / resume 100: a target of 150, writes of at most 50) with no consumer
    fills it toward 150 and waits there, never flow-stopped (on/off flow control writes past 200
    and holds it); a consumer started then drains it and the producer writes on at its pace; the
    consumer stopped, the producer stops writing, the depth within stop plus one write (at
    worst held at stop, as without pacing)."""
    [example] = python_blocks("docs/configuration.md", "Pacing")  # its queue, as written
    exec(example.replace("/tmp/flow/queues/events", str(tmp_path / "q")).replace("body STRING", "producer STRING"),
         {"spark": spark, "declare": declare})
    queue = Queue(str(tmp_path / "q"))
    assert queue.settings().pacing and queue.settings().thresholds.stop_count == 200
    producer, _ = start_producer(spark, queue.path, tmp_path / "p", "p", 100, options={"capacity": 1000})
    output = tmp_path / "out"
    try:
        wait_until(lambda: queue.depth().count >= 100, 120)
        depth = settled(queue)
        assert 100 <= depth <= 200 and queue.subscriptions.get("default").flow_stopped_count == 0
        consumer = start_consumer(spark, queue.path, tmp_path / "c", output)
        try:
            wait_until(lambda: delivered(spark, output) >= depth + 200, 120)  # more than was waiting
        finally:
            consumer.stop()
        assert settled(queue) <= 250, "above stop + a write"
    finally:
        producer.stop()


def test_a_producer_s_pacing_weight_is_in_its_commits_and_the_other_producers_shares(
        spark: SparkSession, tmp_path: Path) -> None:
    """``pacingWeight`` 3 (a producer setting): the sink's commits name it beside the producer, so
    another producer's look at the queue (a gate of weight 1, here in the same process: the
    meters are the process's) takes a quarter of the pace."""
    path = str(tmp_path / "q")
    declare(spark, path, "id BIGINT, body STRING", settings={"stopCount": 200, "resumeCount": 100, "pacing": True})
    heavy = QueueSink(path, options={"pacingWeight": 3}, app_id="heavy")
    heavy(spark.createDataFrame([(i, "m") for i in range(10)], "id BIGINT, body STRING"), 0)
    assert {c.producer: c.weight for c in Queue(path).ledger.commits(-1, Queue(path).refresh()) if c.producer} \
        == {"heavy": 3}
    light = Gate(open_queue(path), producer_settings(path, {"pacingWeight": 1})).step("light").pace
    assert light is not None and (light.producers, light.part) == (2, 1 / 4)
    # the light one has not written yet: the heavy one takes the whole pace until it does
    assert heavy._gates[path].step("heavy").pace.part == 1.0  # type: ignore[union-attr]
