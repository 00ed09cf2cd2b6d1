"""Home-wide limits end to end, on real Spark and Delta: producers of several queues held by the
total depth of their home (ActiveMQ's ``systemUsage``), released under its resume."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from support.invariants import assert_transitions_follow_thresholds
from support.streams import drain, is_held, start_consumer, start_producer, wait_until

from spark_flow.cli import main
from spark_flow.controller.query import start_controller
from spark_flow.exceptions import ConfigurationError, QueueFullError
from spark_flow.flow.gate import Gate
from spark_flow.flow.homeflow import HOME_QUEUE, HOME_ROW, open_home
from spark_flow.flow.queue import open_queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.rules.settings import ProducerSettings
from spark_flow.spark.declare import declare
from spark_flow.spark.session import with_conf
from spark_flow.spark.sink import QueueSink

SCHEMA = "id BIGINT, producer STRING"


def test_two_queues_under_their_own_stop_held_by_the_home_and_released_under_its_resume(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Queues a and b each stop at 100; their home stops at 120 and resumes under 60. Producers
    of capacity 20 fill both, no consumer: both are held while each queue is under its own stop,
    and the home's depth stays <= 120 + 20 + 20. Consumers drain the home under 60: both
    producers go on. The controller shows the home's row; every message arrives once."""
    home, a, b = str(tmp_path / "home"), str(tmp_path / "a"), str(tmp_path / "b")
    with with_conf(spark, {"spark.flow.home": home, "spark.flow.homeStopCount": "120",
                            "spark.flow.homeResumeCount": "60"}):
        queue_a = declare(spark, a, SCHEMA, settings={"stopCount": 100, "resumeCount": 50})
        queue_b = declare(spark, b, SCHEMA, settings={"stopCount": 100, "resumeCount": 50})
    flow, admin = open_home(home), FlowAdmin(home)
    assert queue_a.home == queue_b.home == home and flow.thresholds().stop_count == 120
    controller = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"))
    pa, _ = start_producer(spark, a, tmp_path / "pa", "a", 40, options={"capacity": 20})
    pb, _ = start_producer(spark, b, tmp_path / "pb", "b", 40, options={"capacity": 20})
    consumers = []
    try:
        wait_until(lambda: flow.recorded_stopped() and is_held(pa) and is_held(pb), 120)
        time.sleep(3)  # held producers add nothing more
        depth_a, depth_b = queue_a.depths()["default"], queue_b.depths()["default"]
        assert depth_a.count <= 100 and depth_b.count <= 100, "each queue under its own stop"
        assert 120 < depth_a.count + depth_b.count <= 120 + 20 + 20
        assert not queue_a.subscriptions.get("default").flow_stopped
        assert not queue_b.subscriptions.get("default").flow_stopped
        assert is_held(pa) and is_held(pb)
        wait_until(lambda: _home_row(admin).get("flow_stopped") is True, 60)
        assert _home_row(admin)["stop_count"] == 120 and _home_row(admin)["depth_count"] > 120
        assert main(["--home", home, "status"]) == 0
        assert any(line.split()[:2] == [HOME_QUEUE, HOME_ROW] for line in capsys.readouterr().out.splitlines())

        held = {"a": spark.read.format("delta").load(a).count(), "b": spark.read.format("delta").load(b).count()}
        consumers = [start_consumer(spark, path, tmp_path / f"c{name}", tmp_path / f"out{name}",
                                    maxRecordsPerTrigger=20) for name, path in (("a", a), ("b", b))]
        wait_until(lambda: not flow.recorded_stopped(), 120)
        wait_until(lambda: spark.read.format("delta").load(a).count() > held["a"]
                   and spark.read.format("delta").load(b).count() > held["b"], 90)  # both go on
    finally:
        pa.stop()
        pb.stop()
    drain(queue_a)
    drain(queue_b)
    for consumer in consumers:
        consumer.stop()
    controller.stop()

    transitions = flow.history.read()
    assert [(r["flow_stopped"], r["flow_stopped_count"]) for r in transitions[:2]] == [(True, 1), (False, 1)]
    assert max(r["depth_count"] for r in transitions) <= 120 + 20 + 20
    assert transitions[1]["depth_count"] < 60
    assert_transitions_follow_thresholds(transitions)
    assert admin.plot(HOME_QUEUE, tmp_path / "home.png").stat().st_size > 0
    for name, path in (("a", a), ("b", b)):
        enqueued = spark.read.format("delta").load(path)
        delivered = spark.read.format("delta").load(str(tmp_path / f"out{name}"))
        assert delivered.count() == enqueued.count() > held[name]
        assert delivered.groupBy("id").count().filter("count > 1").count() == 0


def _home_row(admin: FlowAdmin) -> dict:
    rows = admin.status()
    rows = rows[rows["queue"] == HOME_QUEUE].to_dict("records")
    return rows[0] if rows else {}


def test_a_bad_home_limit_fails_before_any_data_moves(spark: SparkSession, tmp_path: Path) -> None:
    """A home resume above its stop: declare fails before the queue exists; a producer whose conf
    has it fails at its first batch before anything is written; a negative limit names its key."""
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    bad = {"spark.flow.home": home, "spark.flow.homeStopCount": "100", "spark.flow.homeResumeCount": "200"}
    with with_conf(spark, bad), pytest.raises(ConfigurationError, match=r"spark.flow.homeResumeCount='200'.*"
                                                                         r"<= spark.flow.homeStopCount=100"):
        declare(spark, path, SCHEMA)
    assert not (tmp_path / "q").exists()

    with with_conf(spark, {"spark.flow.home": home}):
        queue = declare(spark, path, SCHEMA)
    batch = spark.range(5).selectExpr("id", "'p' AS producer")
    with with_conf(spark, bad), pytest.raises(ConfigurationError, match=r"spark\.flow\.homeResumeCount='200'"):
        QueueSink(path, app_id="bad-home")(batch, 0)
    with with_conf(spark, {"spark.flow.homeStopCount": "-1"}), pytest.raises(
            ConfigurationError, match=r"spark.flow.homeStopCount='-1' is not valid"):
        QueueSink(path, app_id="negative-home")(batch, 0)
    assert spark.read.format("delta").load(path).count() == 0
    assert queue.depths()["default"].count == 0


def test_a_gate_of_a_home_without_limits_reads_no_other_queue(spark: SparkSession, tmp_path: Path) -> None:
    """No home limit: a gate looks at its own queue only. With one, it reads the home's other
    queues, only their new commits."""
    home, a, b = str(tmp_path / "home"), str(tmp_path / "a"), str(tmp_path / "b")
    with with_conf(spark, {"spark.flow.home": home}):
        queue_a = declare(spark, a, SCHEMA)
        declare(spark, b, SCHEMA)
    spark.range(3).selectExpr("id", "'p' AS producer").write.format("delta").mode("append").save(b)
    other = open_queue(b)
    reads = other.ledger.reads
    status = Gate(open_queue(a)).step()
    assert status.home is not None and not status.home.limited and not status.held
    assert other.ledger.reads == reads, "the home's other queue was not read"

    FlowAdmin(home).set_home(homeStopCount=2)
    status = Gate(queue_a).step()
    assert status.home is not None and status.home.depth.count == 3 and status.held
    assert status.settings.thresholds.enabled is False, "held by its home alone"
    reads = other.ledger.reads
    Gate(queue_a).step()
    assert other.ledger.reads == reads, "no new commit, nothing read again"
    with pytest.raises(QueueFullError, match=r"home .* flow-stopped by its home-wide limits, onFull reject "
                                             r"\(depth 3 messages.*stop 2 messages"):
        rejecting = Gate(queue_a, ProducerSettings(on_full="reject"))
        rejecting.wait(rejecting.step())
