"""The gate: depth per subscription, the flow state machine stepped and recorded once, run-time
threshold changes, several subscriptions, and holding until a consumer makes room.

Messages are appended by plain Delta writers (delta-spark and delta-rs), which count in the
depth like the sink's commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from spark_flow.exceptions import HoldInterruptedError, QueueFullError
from spark_flow.flow.gate import Gate, GateStatus
from spark_flow.flow.queue import Queue
from spark_flow.records.transitions import transition_detail
from spark_flow.rules.depth import Depth, Position
from spark_flow.rules.settings import ProducerSettings
from spark_flow.spark.declare import declare

pytestmark = pytest.mark.timeout(120)

SCHEMA = "id BIGINT, body STRING"


def append(path: str, ids: Iterable[int]) -> int:
    """Append messages with delta-rs (a writer that does not use spark-flow); return the commit's version."""
    ids = list(ids)
    write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64()), "body": [f"m{i}" for i in ids]}), mode="append")
    return DeltaTable(path).version()


def test_observe_turns_on_above_stop_and_two_gates_count_the_crossing_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Stop 5: a depth of 5 is not over it, 6 is. Two gates (separate handles, as two
    producers) looking at the same crossing at the same moment record one transition."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 3})
    spark.range(5).selectExpr("id", "concat('m', id) AS body").write.format("delta").mode("append").save(path)
    first, second = Gate(Queue(path)), Gate(Queue(path))

    status = first.step()
    assert status.depth == Depth(5, status.depth.size) and not status.held
    assert status.flow_stopped_count == 0

    append(path, [5])
    barrier = threading.Barrier(2)
    seen: dict[str, GateStatus] = {}

    def observe(name: str, gate: Gate) -> None:
        barrier.wait()
        seen[name] = gate.step()

    threads = [threading.Thread(target=observe, args=item) for item in (("first", first), ("second", second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(s.held and s.depth.count == 6 and s.flow_stopped_count == 1 for s in seen.values()), seen
    assert second.step().flow_stopped_count == 1 and first.step().flow_stopped_count == 1

    queue = Queue(path)
    sub = queue.subscriptions.get("default")
    assert (sub.flow_stopped, sub.flow_stopped_count) == (True, 1)
    history = queue.history.read()
    assert [(r["flow_stopped"], r["flow_stopped_count"], r["depth_count"]) for r in history] == [(True, 1, 6)]
    assert (history[0]["stop_count"], history[0]["resume_count"]) == (5, 3)


def test_threshold_changed_at_run_time_applies_at_the_next_observe(spark: SparkSession, tmp_path: Path) -> None:
    """Stop 10 / resume 2, depth 6 after an ack keeps flow ON; raising flow.resumeCount above
    the depth releases at the next look, and lowering flow.stopCount under it stops again."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 10, "resumeCount": 2})
    gate = Gate(queue)
    first = append(path, range(5))
    append(path, range(5, 11))
    assert gate.step().held
    queue.acknowledge("default", first)
    status = gate.step()
    assert status.held and status.depth.count == 6

    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('flow.resumeCount' = '8')")
    status = gate.step()
    assert not status.held
    assert (status.thresholds.stop_count, status.thresholds.resume_count) == (10, 8)
    assert status.depth.count == 6 and status.flow_stopped_count == 1

    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('flow.stopCount' = '4', 'flow.resumeCount' = '3')")
    status = gate.step()
    assert status.held and status.flow_stopped_count == 2
    assert (status.thresholds.stop_count, status.thresholds.resume_count) == (4, 3)


def test_queue_is_stopped_while_any_subscription_is_and_dropping_it_releases(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two subscriptions: the one that acknowledged everything is OFF, the other still holds
    the queue (and a reject producer fails); dropping it releases the queue."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 10, "resumeCount": 5})
    queue.create_subscription("audit", "earliest")
    gate = Gate(queue)
    latest = append(path, range(11))
    status = gate.step()
    assert status.held
    assert {name: s.flow_stopped for name, s in status.states.items()} == {"audit": True, "default": True}

    queue.acknowledge("default", latest)
    status = gate.step()
    assert status.held
    assert status.depths == {"audit": Depth(11, 0), "default": Depth(0, 0)}
    assert status.depth == Depth(11, 0), "the deepest subscription"
    assert {name: s.flow_stopped for name, s in status.states.items()} == {"audit": True, "default": False}
    with pytest.raises(QueueFullError, match=r"queue 'q' refused the batch: flow-stopped, onFull reject \(depth 11 messages"):
        rejecting = Gate(queue, ProducerSettings(on_full="reject"))
        rejecting.wait(rejecting.step())

    queue.drop_subscription("audit")
    status, held = gate.wait(gate.step())
    assert not status.held and held == 0.0
    assert list(status.depths) == ["default"]
    assert [(s.name, s.flow_stopped, s.flow_stopped_count) for s in queue.subscriptions.list()] == [("default", False, 1)]


def test_wait_holds_until_a_consumer_acknowledges_or_the_query_stops(spark: SparkSession, tmp_path: Path) -> None:
    """``wait`` polls while stopped: it returns still stopped as soon as ``is_active`` turns
    False, and not stopped once another process's consumer has acknowledged."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 3, "resumeCount": 1})
    latest = append(path, range(4))
    gate = Gate(queue, ProducerSettings(poll_interval=0.1))

    status, held = gate.wait(gate.step(), is_active=lambda: False)
    assert status.held and held < 1

    def consume() -> None:
        time.sleep(0.5)
        Queue(path).acknowledge("default", latest)

    consumer = threading.Thread(target=consume)
    consumer.start()
    status, held = gate.wait(gate.step())
    consumer.join()
    assert not status.held and status.depth.count == 0
    assert 0.4 <= held < 5
    assert status.flow_stopped_count == 1


def test_a_transition_whose_recorder_died_gets_its_history_row_once(spark: SparkSession, tmp_path: Path) -> None:
    """A process killed between the compare-and-set and its history row (simulated: the
    transition is set directly) leaves STOPPED 1 without a row; the next gate to look adds it,
    and neither that gate nor another recording the same transition adds it twice."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 3})
    append(path, range(8))
    queue = Queue(path)
    stopped = transition_detail(Depth(8, 0), queue.settings().thresholds, datetime.now(UTC))
    queue.subscriptions.transition(queue.subscriptions.get("default"), True, 1, stopped)
    assert queue.history.read() == []

    status = Gate(Queue(path)).step()
    assert status.held and status.flow_stopped_count == 1
    Gate(Queue(path)).step()
    queue.history.record(queue.subscriptions.get("default"))
    rows = queue.history.read()
    assert [(r["flow_stopped"], r["flow_stopped_count"], r["depth_count"]) for r in rows] == [(True, 1, 8)]


def test_a_transition_seen_before_its_maker_records_it_keeps_the_depth_it_was_made_at(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Invariant 8, as the README walkthrough broke it: a gate's STOPPED is in the subscriptions
    table before its history row is; meanwhile the consumer drains some and another process
    looks. The row that process adds is the transition's (depth 8 over stop 5), not the 4 it sees
    now, which is no reason to stop. The maker is paused by a log handler between the two writes."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 3})
    version = append(path, range(8))
    paused, release = threading.Event(), threading.Event()

    class PauseAtTheLogLine(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "STOPPED" in record.getMessage():
                paused.set()
                release.wait(60)

    logger, handler = logging.getLogger("spark_flow.flow"), PauseAtTheLogLine()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        maker = threading.Thread(target=Gate(Queue(path)).step)
        maker.start()
        assert paused.wait(60)
        Queue(path).acknowledge("default", Position(version - 1, 4))
        seen = Gate(Queue(path)).step()
        assert seen.held and seen.depth.count == 4
    finally:
        release.set()
        logger.removeHandler(handler)
        logger.setLevel(level)
    maker.join(60)
    rows = Queue(path).history.read()
    assert [(r["flow_stopped"], r["flow_stopped_count"], r["depth_count"]) for r in rows] == [(True, 1, 8)]


@pytest.mark.parametrize(("capacity", "settings", "window"), [(3, {"stopCount": 100}, 3), (10, {"stopCount": 100}, 5),
                                                             (3, {}, 5)],
                         ids=["capacity is smaller", "one second of quota is smaller", "no thresholds: no capacity"])
def test_a_write_is_at_most_a_capacity_window_and_one_second_of_quota(spark: SparkSession, tmp_path: Path,
                                                                      capacity: int, settings: dict,
                                                                      window: int) -> None:
    """One cut for both: the sink writes a batch in chunks of the smaller of its capacity window
    (when the queue has thresholds) and one second of its publish rate (msgPublishRate 5)."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings=settings)
    gate = Gate(Queue(path), ProducerSettings(capacity=capacity, msg_publish_rate=5))
    assert gate.admit(Depth(15, 150), lambda: True, started=False) == (0.0, window)


def test_a_stopped_query_writes_no_further_chunk_of_its_batch(spark: SparkSession, tmp_path: Path) -> None:
    """Asked for the next chunk of a batch (``started``) once its query is stopped, the gate
    refuses it as a stop, though the queue is far from its stop: the sink's stop must not depend
    on Spark's interruption of the batch's jobs (CI saw a producer through the engine go on
    writing a backlog of chunks past Spark's 60 s stop timeout). A fresh batch's first write is
    not asked about."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 100})
    gate = Gate(Queue(path), ProducerSettings(capacity=3))
    with pytest.raises(HoldInterruptedError, match=r"query stopped in mid-batch into queue '.*q'"):
        gate.admit(Depth(15, 150), lambda: False, started=True)
    assert gate.admit(Depth(15, 150), lambda: False, started=False) == (0.0, 3)
