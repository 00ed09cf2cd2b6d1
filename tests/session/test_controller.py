"""The flow controller as a streaming query on real queues (restart from the checkpoint,
operator commands, stalled consumers, status and history tables); its pure step is in
test_flowstep."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.invariants import assert_transitions_follow_thresholds
from support.streams import is_held, start_consumer, start_producer, status_of, wait_for_looks, wait_until

from spark_flow.controller.query import start_controller, stop_between_batches
from spark_flow.exceptions import ConfigurationError, QueueNotFoundError, UnknownKeyError
from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.declare import declare
from spark_flow.spark.session import with_conf
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import read_queue

SCHEMA = "id BIGINT, body STRING"


def append_plain(spark: SparkSession, path: str, start: int, count: int) -> None:
    """Enqueue with a plain Delta write: no gate looks, so only the controller steps the machine."""
    spark.range(start, start + count).selectExpr("id", "'m' AS body").write.format("delta").mode("append").save(path)


def test_restart_from_checkpoint_keeps_flow_state_and_count_exact(spark: SparkSession, tmp_path: Path) -> None:
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    admin = FlowAdmin(home)
    admin.register(path)
    checkpoint = str(tmp_path / "controller")
    controller = start_controller(spark, home, checkpoint_location=checkpoint, trigger="200 milliseconds")
    try:
        append_plain(spark, path, 0, 10)
        wait_until(lambda: status_of(admin, "q").get("flow_stopped_count") == 1, 60)
        assert queue.subscriptions.get("default").flow_stopped
        controller.stop()  # mid-stream: the next trigger was due

        queue.acknowledge("default", queue.refresh())  # drained while the controller is down
        controller = start_controller(spark, home, checkpoint_location=checkpoint, trigger="200 milliseconds")
        wait_until(lambda: status_of(admin, "q").get("flow_stopped") is False, 60)
        append_plain(spark, path, 10, 10)
        wait_until(lambda: status_of(admin, "q").get("flow_stopped_count") == 2, 60)
        controller.stop()
        controller = start_controller(spark, home, checkpoint_location=checkpoint, trigger="200 milliseconds")
        wait_until(lambda: controller.lastProgress is not None and controller.lastProgress["batchId"] > 0, 60)
    finally:
        controller.stop()

    status = status_of(admin, "q")
    assert (status["flow_stopped"], status["flow_stopped_count"], status["depth_count"]) == (True, 2, 10)
    sub = queue.subscriptions.get("default")
    assert (sub.flow_stopped, sub.flow_stopped_count) == (True, 2)
    transitions = [(r["event"], r["flow_stopped_count"]) for r in admin.history("q") if r["event"] != "sample"]
    assert transitions == [("stopped", 1), ("resumed", 1), ("stopped", 2)]
    assert [r["flow_stopped_count"] for r in queue.history.read()] == [1, 1, 2]
    chart = admin.plot("q", tmp_path / "q.png")
    assert chart.read_bytes()[:4] == b"\x89PNG"


def test_a_controller_whose_batches_follow_each_other_stops_after_the_one_running(
        spark: SparkSession, tmp_path: Path) -> None:
    """A controller whose looks take longer than its trigger interval (a busy machine, many
    queues) runs its batches back to back: there is never a moment with none running. The stop
    waits for the batch running to end, not for a pause that never comes (it waited out its
    whole timeout, 30 s: 71 batches more here), and the query ends without an error."""
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    FlowAdmin(home).register(path)
    controller = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"),
                                  trigger="10 milliseconds")
    try:
        wait_until(lambda: controller.lastProgress is not None and controller.lastProgress["batchId"] >= 2, 60)
        called_at = controller.lastProgress["batchId"]
        stop_between_batches(controller)
    finally:
        controller.stop()
    assert not controller.isActive and controller.exception() is None
    assert controller.lastProgress["batchId"] <= called_at + 2, "the stop waited for batches after the one running"


def test_a_controller_keeps_its_state_in_two_partitions_whatever_the_session_s_shuffle_partitions(
        spark: SparkSession, tmp_path: Path) -> None:
    """The state's partitions are the controller's (``STATE_PARTITIONS``), not the session's
    ``spark.sql.shuffle.partitions`` (a cluster's default is 200: as many state store tasks and
    Python workers in every look); the session's own setting is left as it was."""
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    FlowAdmin(home).register(path)
    with with_conf(spark, {"spark.sql.shuffle.partitions": "5"}):
        controller = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"),
                                      trigger={"availableNow": True})
        assert spark.conf.get("spark.sql.shuffle.partitions") == "5"
    assert controller.awaitTermination(120) and controller.exception() is None
    [look] = controller.recentProgress
    assert [op["numShufflePartitions"] for op in look["stateOperators"]] == [2]
    again = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"), trigger={"availableNow": True})
    assert again.awaitTermination(120) and again.exception() is None, "its own checkpoint goes on"


def test_a_checkpoint_whose_state_an_earlier_controller_kept_per_subscription_is_refused_before_the_start(
        spark: SparkSession, tmp_path: Path) -> None:
    """Before 48 the controller kept a state row per (queue, subscription); Spark would fail on
    such a checkpoint at the first batch and suggest skipping its schema check. The checkpoint
    here is made by a query of that layout."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    keys, checkpoint = str(tmp_path / "keys"), str(tmp_path / "controller")
    spark.createDataFrame([("q", "default")], "queue STRING, subscription STRING").write.format("delta").save(keys)

    def keep(key: tuple[str, str], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        state.update((False, 0, -1, -1, False, -1))
        yield from frames

    earlier = (spark.readStream.format("delta").load(keys).groupBy("queue", "subscription")
               .applyInPandasWithState(keep, "queue STRING, subscription STRING", EARLIER_STATE, "Update",
                                       GroupStateTimeout.NoTimeout)
               .writeStream.outputMode("update").format("noop").option("checkpointLocation", checkpoint)
               .trigger(availableNow=True).start())
    assert earlier.awaitTermination(120) and earlier.exception() is None
    with pytest.raises(ConfigurationError, match=r"checkpoint_location=.*give a new checkpoint location"):
        start_controller(spark, str(tmp_path / "home"), checkpoint_location=checkpoint)
    assert not spark.streams.active


#: The state of a controller before 48: one row per queue and subscription.
EARLIER_STATE = ("flow_stopped BOOLEAN, flow_stopped_count BIGINT, position BIGINT, progress_at BIGINT, "
                 "stalled BOOLEAN, held_since BIGINT")


@pytest.fixture(scope="module")
def controlled(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FlowAdmin, Path]]:
    """A home with a running controller, shared by the tests below (each declares its own queue).
    It looks every second, its default: a look takes about 0.5 s and 0.7 s of CPU here, so at
    300 ms its looks followed each other with no pause (this module alone: 155 CPU seconds then,
    119 now, in 99 s both times)."""
    base = tmp_path_factory.mktemp("controlled")
    controller = start_controller(spark, str(base / "home"), forget_after="3s")
    yield FlowAdmin(str(base / "home")), base
    controller.stop()


def enqueues_nothing_for(queue: Queue, seconds: float) -> bool:
    before = queue.refresh()
    time.sleep(seconds)
    return queue.refresh() == before


def declare_registered(spark: SparkSession, admin: FlowAdmin, path: Path, schema: str = SCHEMA,
                       **settings: object) -> Queue:
    queue = declare(spark, str(path), schema, settings=settings)
    admin.register(str(path))
    return queue


def test_an_available_now_controller_looks_once_per_run(spark: SparkSession, tmp_path: Path) -> None:
    """Run on a schedule (serverless compute has no processing-time triggers): each run looks at
    every queue once, applies the commands issued since the last run, and stops by itself. A
    command is in force once issued (its issuer applies it): the next run's look judges with it,
    and that run records the command after the transition it caused."""
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    admin = FlowAdmin(home)
    admin.register(path)
    append_plain(spark, path, 0, 10)
    checkpoint = str(tmp_path / "controller")

    def run() -> dict[str, object]:
        controller = start_controller(spark, home, checkpoint_location=checkpoint, trigger={"availableNow": True})
        assert controller.awaitTermination(120), "an availableNow controller stops after its look"
        assert controller.exception() is None
        return status_of(admin, "q")

    first = run()
    assert (first["depth_count"], first["flow_stopped"], first["flow_stopped_count"]) == (10, True, 1)
    command = admin.set("q", stopCount=50, resumeCount=20)
    run()
    assert queue.runtime_settings.applied() == command
    third = run()
    assert (third["stop_count"], third["flow_stopped"], third["flow_stopped_count"]) == (50, False, 1)
    assert [r["event"] for r in admin.history("q") if r["event"] != "sample"] == ["stopped", "resumed", "command"]


def test_manual_stop_holds_a_producer_with_an_empty_queue_and_start_releases_it(
        spark: SparkSession, controlled: tuple[FlowAdmin, Path]) -> None:
    admin, base = controlled
    path = base / "manual"
    queue = declare_registered(spark, admin, path, "id BIGINT, producer STRING", stopCount=1000)
    producer, _ = start_producer(spark, str(path), base / "manual_producer", "p", 20)
    try:
        wait_until(lambda: queue.refresh() > 1, 60)
        admin.stop_producers("manual")
        wait_until(lambda: status_of(admin, "manual").get("producers_held") is True, 60)  # applied
        # held, and nothing enqueued for 3 s (a write in flight when the command was applied lands first)
        wait_until(lambda: is_held(producer) and enqueues_nothing_for(queue, 3), 90)
        held_at = queue.refresh()
        assert is_held(producer), "a stopped producer writes nothing, and stays held"
        assert queue.depths()["default"].count < 1000
        status = status_of(admin, "manual")
        assert status["producers_stopped"] and status["producers_held"] and not status["flow_stopped"]
        assert status["held_since"] is not None

        admin.start_producers("manual")
        wait_until(lambda: queue.refresh() > held_at + 1, 60)
        wait_until(lambda: status_of(admin, "manual").get("producers_held") is False, 30)
    finally:
        producer.stop()
    events = [r["event"] for r in admin.history("manual") if r["event"] != "sample"]
    assert events == ["command", "command"]


def test_set_changes_thresholds_at_run_time_through_the_controller(
        spark: SparkSession, controlled: tuple[FlowAdmin, Path]) -> None:
    admin, base = controlled
    queue = declare_registered(spark, admin, base / "tuned", stopCount=100, resumeCount=50)
    append_plain(spark, str(base / "tuned"), 0, 30)
    wait_until(lambda: status_of(admin, "tuned").get("depth_count") == 30, 60)
    assert not status_of(admin, "tuned")["flow_stopped"]
    admin.set("tuned", stopCount=20, resumeCount="10")
    wait_until(lambda: status_of(admin, "tuned").get("flow_stopped") is True, 60)
    status = status_of(admin, "tuned")
    assert (status["stop_count"], status["resume_count"], status["flow_stopped_count"]) == (20, 10, 1)
    assert queue.settings().thresholds.stop_count == 20
    assert queue.properties()["flow.stopCount"] == "100", "the queue table itself is not altered"

    admin.unset("tuned", "stopCount", "resumeCount")  # back to the queue's own 100 / 50
    wait_until(lambda: status_of(admin, "tuned").get("stop_count") == 100, 60)
    status = status_of(admin, "tuned")
    assert (status["resume_count"], status["flow_stopped"], status["flow_stopped_count"]) == (50, False, 1)
    assert queue.runtime_settings.current() == {}


def test_a_producer_with_conf_thresholds_and_a_controller_without_share_one_flow_state(
        spark: SparkSession, controlled: tuple[FlowAdmin, Path]) -> None:
    """The README walkthrough's bug: the producer gets stop 20 / resume 10 from its Spark conf,
    the controller (started with no thresholds in its conf) judged the queue with none and
    resumed it on every look, so one hold counted dozens of stops. The producer records its
    conf's thresholds with the queue; the controller judges with them: one hold, one stop, and
    the status shows 20 / 10."""
    admin, base = controlled
    path = base / "walk"
    queue = declare_registered(spark, admin, path, "id BIGINT, producer STRING")
    with with_conf(spark, {"spark.flow.stopCount": "20", "spark.flow.resumeCount": "10"}):
        producer, _ = start_producer(spark, str(path), base / "walk_producer", "p", 40, options={"capacity": 10})
        wait_until(lambda: "flow.stopCount" in Queue(str(path)).properties(), 60)
    consumer = None
    try:
        wait_until(lambda: queue.subscriptions.get("default").flow_stopped, 120)  # the producer's gate
        wait_until(lambda: is_held(producer) and status_of(admin, "walk").get("flow_stopped") is True, 60)
        wait_for_looks(admin, "walk", 4)  # one hold, however often it looks (the bug: a stop per look)
        status = status_of(admin, "walk")
        assert (status["stop_count"], status["resume_count"]) == (20, 10)
        assert (status["flow_stopped"], status["flow_stopped_count"]) == (True, 1)
        assert 20 < status["depth_count"] <= 30
        consumer = start_consumer(spark, str(path), base / "walk_consumer", base / "walk_out", maxRecordsPerTrigger=5)
        wait_until(lambda: queue.subscriptions.get("default").flow_stopped_count >= 2, 120)
    finally:
        producer.stop()
        if consumer is not None:
            consumer.stop()
    assert_transitions_follow_thresholds(queue.history.read())
    sub = queue.subscriptions.get("default")
    stops = [r for r in queue.history.read() if r["flow_stopped"]]
    assert [r["flow_stopped_count"] for r in stops] == list(range(1, sub.flow_stopped_count + 1))


def test_stalled_subscription_is_flagged_and_skip_evicts_it(
        spark: SparkSession, controlled: tuple[FlowAdmin, Path]) -> None:
    admin, base = controlled
    queue = declare_registered(spark, admin, base / "stall", stallTimeout="1s")
    queue.create_subscription("slow")
    append_plain(spark, str(base / "stall"), 0, 5)
    wait_until(lambda: status_of(admin, "stall", "slow").get("consumer_stalled") is True, 60)
    assert status_of(admin, "stall", "slow")["oldest_message_age_seconds"] >= 1.0
    admin.set("stall", stalledConsumerPolicy="skip")
    wait_until(lambda: queue.subscriptions.get("slow").position == queue.refresh(), 60)
    assert queue.subscriptions.get("slow").discarded_count == 5
    wait_until(lambda: status_of(admin, "stall", "slow").get("depth_count") == 0, 60)
    assert not status_of(admin, "stall", "slow")["consumer_stalled"]


@pytest.mark.parametrize("gated", [True, False], ids=["gated-source", "held-sink"])
def test_a_consumer_held_back_by_its_downstream_queue_is_never_stalled(
        spark: SparkSession, controlled: tuple[FlowAdmin, Path], gated: bool) -> None:
    """A pipeline stage reads queue ``up`` and writes queue ``down`` (stop 10), which nobody
    consumes: the stage is held back by ``down`` (its source admits nothing, or its QueueSink
    holds its batch). Then ``up`` gets a stall timeout of 1 s with policy skip, and its
    subscription makes no progress for many stall timeouts. It is backpressured, not stalled:
    never flagged, and its backlog is never skipped."""
    admin, base = controlled
    name, down = f"up_{gated}".lower(), str(base / f"down_{gated}".lower())
    up = declare_registered(spark, admin, base / name)
    declare_registered(spark, admin, Path(down), stopCount=10, resumeCount=5)
    for first in range(0, 60, 10):
        append_plain(spark, str(base / name), first, 10)
    options = {"maxRecordsPerTrigger": 5, **({"downstream": down} if gated else {})}
    stage = (read_queue(spark, str(base / name), **options).drop("_position", "_enqueue_time").writeStream
             .foreachBatch(QueueSink(down, options={"capacity": 5})).trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(base / f"stage_{gated}")).start())
    try:
        wait_until(lambda: Queue(down).subscriptions.get("default").flow_stopped, 120)
        admin.set(name, stallTimeout="1s", stalledConsumerPolicy="skip")
        wait_until(lambda: up.settings().stall_timeout == 1.0, 60)
        held_at, since = up.subscriptions.get("default").position, time.monotonic()
        wait_for_looks(admin, name, 6)  # six looks, over three stall timeouts at least
        time.sleep(max(0.0, since + 3 - time.monotonic()))
        assert up.subscriptions.get("default").position == held_at, "the stage is held"
        status = status_of(admin, name)
        assert status["depth_count"] > 0 and status["consumer_stalled"] is False
        assert up.subscriptions.get("default").discarded_count == 0
        assert not [r for r in admin.history(name) if r["event"] in ("stalled", "evicted")]
        assert up.subscriptions.get("default").downstream == (down,)
    finally:
        stage.stop()


def test_a_dropped_subscription_leaves_the_status_table(
        spark: SparkSession, controlled: tuple[FlowAdmin, Path]) -> None:
    admin, base = controlled
    queue = declare_registered(spark, admin, base / "dropping")
    queue.create_subscription("temp")
    wait_until(lambda: bool(status_of(admin, "dropping", "temp")), 60)
    queue.drop_subscription("temp")
    wait_until(lambda: not status_of(admin, "dropping", "temp"), 60)
    assert status_of(admin, "dropping", "default")


class TestBadCommands:
    """Commands for unknown queues and malformed settings fail before anything is written."""

    @pytest.fixture
    def admin(self, spark: SparkSession, tmp_path: Path) -> FlowAdmin:
        admin = FlowAdmin(str(tmp_path / "home"))
        declare_registered(spark, admin, tmp_path / "orders.eu", stopCount=5, resumeCount=2)
        return admin

    @pytest.mark.parametrize(("call", "error", "match"), [
        (lambda a: a.stop_producers("nope"), QueueNotFoundError, "'nope'.*no registered queue matches.*'orders.eu'"),
        (lambda a: a.start_producers("*.us"), QueueNotFoundError, "'\\*.us'.*no registered queue matches"),
        (lambda a: a.set("nope", stopCount=3), QueueNotFoundError, "'nope'"),
        (lambda a: a.set("orders.eu", stopCount="abc"), ConfigurationError, "stopCount='abc'.*whole number"),
        (lambda a: a.set("orders.eu", resumeCount=9), ConfigurationError, "resumeCount='9'.*<= flow.stopCount=5"),
        (lambda a: a.set("orders.eu", stopCont=3), UnknownKeyError, "stopCont.*Did you mean 'stopCount'"),
        (lambda a: a.set("orders.eu", producersStopped="true"), ConfigurationError, "producersStopped.*stop-producers"),
        (lambda a: a.set("orders.eu", capacity=5), ConfigurationError, "capacity is a producer setting"),
        (lambda a: a.set("orders.eu", policy="drop"), ConfigurationError, "policy='drop'.*one of flow, ring"),
        (lambda a: a.set("orders.eu", policy="ring"), ConfigurationError, "policy='ring'.*maxCount or maxSize"),
        (lambda a: a.set("orders.eu", maxCount=3), ConfigurationError, r"flow.stopCount='5'.*<= maxCount=3"),
        (lambda a: a.set("orders.eu"), ConfigurationError, "at least one setting"),
        (lambda a: a.unset("orders.eu"), ConfigurationError, "at least one setting to remove"),
        (lambda a: a.unset("orders.eu", "stopCuont"), UnknownKeyError, "Did you mean 'stopCount'"),
    ], ids=["stop-unknown", "start-pattern-unmatched", "set-unknown", "set-not-a-number", "set-resume-above-stop",
            "set-unknown-key", "set-manual-stop-key", "set-producer-setting", "set-bad-policy", "set-ring-without-max",
            "set-stop-above-max", "set-nothing", "unset-nothing", "unset-unknown-key"])
    def test_refused_and_nothing_written(self, admin: FlowAdmin, call: object, error: type, match: str) -> None:
        before = admin.commands.latest()
        with pytest.raises(error, match=match):
            call(admin)  # type: ignore[operator]
        assert admin.commands.latest() == before
        assert admin.queue("orders.eu").runtime_settings.current() == {}

    def test_set_is_checked_with_the_commands_not_yet_applied(self, admin: FlowAdmin) -> None:
        """On a 5/2 queue, ``set stopCount=3`` is fine; ``set resumeCount=4`` would be fine on its
        own, but with the first (not applied yet: no controller runs) the queue would be 3/4,
        so it is refused when issued, not applied to crash every producer of the queue."""
        first = admin.set("orders.eu", stopCount=3)
        with pytest.raises(ConfigurationError, match=r"resumeCount='4'.*<= stopCount=3"):
            admin.set("orders.eu", resumeCount=4)
        assert admin.commands.latest() == first
        admin.unset("orders.eu", "stopCount")  # back to 5: now resume 4 is fine
        admin.set("orders.eu", resumeCount=4)
        assert [(c.command, dict(c.settings)) for c in admin.commands.read()] == [
            ("set", {"stopCount": "3"}), ("unset", {"stopCount": None}), ("set", {"resumeCount": "4"})]

    def test_patterns_and_all_match_registered_queues(self, admin: FlowAdmin) -> None:
        assert admin.matching("orders.*") == ["orders.eu"] == admin.matching(">")
        first = admin.stop_producers("orders.>")
        assert admin.start_producers() == first + 1
        assert [(c.id, c.command, c.target) for c in admin.commands.read()] == [
            (first, "stop-producers", "orders.>"), (first + 1, "start-producers", ">")]
