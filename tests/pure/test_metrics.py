"""The Prometheus metrics of a home, read at scrape time from real Delta tables written by
deltalake and by a real gate (no Spark here; a real Prometheus scrapes a held producer's home in
test_monitoring): every figure the status table has, right at the next scrape with no
controller running, and no secret in them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.homes import acknowledge_all, enqueue, look_as_a_producer, make_queue

from spark_flow.ops.admin import FlowAdmin
from spark_flow.ops.metrics import METRICS, FlowCollector, exposition, metric_names
from spark_flow.ops.view import look

Sample = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(home: str, storage_options: dict[str, str] | None = None) -> Sample:
    """One scrape through the collector, as the series Prometheus stores: name and labels -> value."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FlowCollector(home, storage_options))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Sample, name: str, queue: str | None = None, subscription: str | None = None) -> float | None:
    for (found, labels), got in samples.items():
        wanted = {k: v for k, v in (("queue", queue), ("subscription", subscription)) if v is not None}
        if found == name and wanted.items() <= dict(labels).items():
            return got
    return None


@pytest.fixture
def home(tmp_path: Path) -> str:
    return str(tmp_path / "home")


def test_every_status_figure_is_a_metric_of_its_queue_and_subscription(home: str) -> None:
    """Depth, age, thresholds, flowStopped, flowStoppedCount, the last transition, held
    producers and since when, as the queue's own tables say them."""
    queue = make_queue(home, "events", {"stopCount": 5, "resumeCount": 2, "stopSize": 1000, "resumeSize": 500,
                                        "stopAge": "1h", "maxCount": 10})
    enqueue(queue, 8, size=20)
    queue.create_subscription("audit", "latest")
    assert look_as_a_producer(queue).held
    samples = scrape(home)
    sub = queue.subscriptions.get("default")
    assert value(samples, "spark_flow_depth_messages", "events", "default") == 8
    assert value(samples, "spark_flow_depth_bytes", "events", "default") == 160
    assert value(samples, "spark_flow_depth_messages", "events", "audit") == 0
    assert 0 < value(samples, "spark_flow_oldest_message_age_seconds", "events", "default") < 60
    assert value(samples, "spark_flow_oldest_message_age_seconds", "events", "audit") == 0
    assert value(samples, "spark_flow_flow_stopped", "events", "default") == 1
    assert value(samples, "spark_flow_flow_stopped_total", "events", "default") == 1
    assert value(samples, "spark_flow_flow_stopped", "events", "audit") == 0
    assert value(samples, "spark_flow_last_transition_timestamp_seconds", "events", "default") == pytest.approx(
        sub.last_transition.timestamp())
    assert value(samples, "spark_flow_producers_held", "events") == 1
    assert value(samples, "spark_flow_producers_held_since_timestamp_seconds", "events") == pytest.approx(
        sub.last_transition.timestamp())
    assert value(samples, "spark_flow_producers_stopped", "events") == 0
    expected = {"spark_flow_stop_messages": 5, "spark_flow_resume_messages": 2, "spark_flow_stop_bytes": 1000,
                "spark_flow_resume_bytes": 500, "spark_flow_stop_age_seconds": 3600,
                "spark_flow_resume_age_seconds": 3600, "spark_flow_max_messages": 10,
                "spark_flow_latest_version": queue.refresh(), "spark_flow_queue_up": 1}
    assert {name: value(samples, name, "events") for name in expected} == expected
    assert value(samples, "spark_flow_max_bytes", "events") is None  # no max: absent, never a 0 to divide by
    assert value(samples, "spark_flow_consumer_stalled", "events", "default") == 0
    assert value(samples, "spark_flow_acknowledged_version", "events", "audit") == queue.refresh()
    assert value(samples, "spark_flow_queues") == 1
    assert {labels for (name, labels) in samples if name == "spark_flow_depth_messages"} == {
        (("home", home), ("queue", "events"), ("subscription", s)) for s in ("audit", "default")}


def test_each_scrape_reads_the_tables_as_they_are_then_without_a_controller(home: str) -> None:
    """A new commit, an acknowledgement, a gate's resume and an applied operator stop are each in
    the very next scrape."""
    queue = make_queue(home, "events", {"stopCount": 5, "resumeCount": 2})
    assert value(scrape(home), "spark_flow_depth_messages", "events", "default") == 0
    enqueue(queue, 3)
    assert value(scrape(home), "spark_flow_depth_messages", "events", "default") == 3
    enqueue(queue, 4)
    look_as_a_producer(queue)
    samples = scrape(home)
    assert (value(samples, "spark_flow_depth_messages", "events", "default"),
            value(samples, "spark_flow_flow_stopped", "events", "default"),
            value(samples, "spark_flow_producers_held", "events")) == (7, 1, 1)
    acknowledge_all(queue)
    assert value(scrape(home), "spark_flow_depth_messages", "events", "default") == 0
    look_as_a_producer(queue)  # a held producer's next look records the resume
    samples = scrape(home)
    assert (value(samples, "spark_flow_flow_stopped", "events", "default"),
            value(samples, "spark_flow_flow_stopped_total", "events", "default"),
            value(samples, "spark_flow_producers_held", "events"),
            value(samples, "spark_flow_producers_held_since_timestamp_seconds", "events")) == (0, 1, 0, None)
    queue.runtime_settings.apply({"producersStopped": "true"}, 0)  # stop-producers, as the controller applies it
    samples = scrape(home)
    assert (value(samples, "spark_flow_producers_stopped", "events"), value(samples, "spark_flow_producers_held", "events")) == (1, 1)
    assert value(samples, "spark_flow_producers_held_since_timestamp_seconds", "events") == pytest.approx(
        queue.runtime_settings.changed_at("producersStopped").timestamp())


def test_an_operator_command_holds_at_once_without_a_controller_and_shows_so(home: str) -> None:
    """What holds producers is what gates read: the run-time settings, which the operator's
    command writes at once (no controller runs here)."""
    make_queue(home, "events")
    FlowAdmin(home).stop_producers("events")
    samples = scrape(home)
    assert (value(samples, "spark_flow_producers_stopped", "events"), value(samples, "spark_flow_producers_held", "events")) == (1, 1)


def test_a_stalled_consumer_and_a_backpressured_one(home: str) -> None:
    """The consumer of ``slow`` has acknowledged nothing for its stallTimeout: stalled. The
    consumer of ``upstream`` writes to ``slow``, which holds its producers: backpressured,
    never stalled however long it waits."""
    slow = make_queue(home, "slow", {"stopCount": 2, "stallTimeout": "500ms"})
    upstream = make_queue(home, "upstream", {"stopCount": 2, "stallTimeout": "500ms"})
    upstream.subscriptions.add_downstream("default", [slow.path])
    for queue in (slow, upstream):
        enqueue(queue, 3)
        look_as_a_producer(queue)
    time.sleep(0.6)
    samples = scrape(home)
    assert (value(samples, "spark_flow_consumer_stalled", "slow", "default"),
            value(samples, "spark_flow_consumer_backpressured", "slow", "default")) == (1, 0)
    assert (value(samples, "spark_flow_consumer_stalled", "upstream", "default"),
            value(samples, "spark_flow_consumer_backpressured", "upstream", "default")) == (0, 1)
    acknowledge_all(slow)  # it acknowledges: no longer stalled; its queue resumes at a gate's look
    look_as_a_producer(slow)
    samples = scrape(home)
    assert value(samples, "spark_flow_consumer_stalled", "slow", "default") == 0
    assert value(samples, "spark_flow_consumer_backpressured", "upstream", "default") == 0
    assert value(samples, "spark_flow_consumer_stalled", "upstream", "default") == 0  # released just now: not late


def test_discarded_messages_are_a_counter(home: str) -> None:
    queue = make_queue(home, "ring", {"policy": "ring", "maxCount": 3})
    enqueue(queue, 5)
    queue.acknowledge("default", 0, discarded=2)  # as a ring makes room
    assert value(scrape(home), "spark_flow_discarded_messages_total", "ring", "default") == 2


def test_expired_and_dead_lettered_messages_are_counters(home: str) -> None:
    """The safety valves' counts, as the subscriptions table has them."""
    queue = make_queue(home, "events", {"messageTtl": "1h", "maxDeliveries": 3})
    enqueue(queue, 5)
    queue.acknowledge("default", 0, expired=4)  # as an expiry skips what waited past messageTtl
    queue.subscriptions.record_delivery("default", None, None, dead_lettered=1)  # as DeadLetters moves one
    samples = scrape(home)
    assert value(samples, "spark_flow_expired_messages_total", "events", "default") == 4
    assert value(samples, "spark_flow_dead_lettered_messages_total", "events", "default") == 1


def test_the_home_row_with_home_wide_limits(home: str) -> None:
    """The home's depth (the sum of its queues'), limits and recorded flow state."""
    one, two = make_queue(home, "one"), make_queue(home, "two")
    FlowAdmin(home).set_home(homeStopCount=5, homeResumeCount=3)
    enqueue(one, 4)
    enqueue(two, 3)
    status = look_as_a_producer(one)  # the gate steps the home's state too
    assert status.home_stopped
    samples = scrape(home)
    assert [value(samples, f"spark_flow_home_{name}") for name in (
        "depth_messages", "flow_stopped", "flow_stopped_total", "stop_messages", "resume_messages")] == [7, 1, 1, 5, 3]
    assert value(samples, "spark_flow_home_stop_bytes") is None
    assert value(samples, "spark_flow_producers_held", "two") == 1  # held by its home, however shallow
    assert value(samples, "spark_flow_flow_stopped", "two", "default") == 0


def test_a_queue_that_cannot_be_read_is_down_and_the_others_are_served(home: str, tmp_path: Path) -> None:
    make_queue(home, "kept")
    FlowAdmin(home).registry.register("gone", str(tmp_path / "no-queue-here"))
    samples = scrape(home)
    assert (value(samples, "spark_flow_queue_up", "gone"), value(samples, "spark_flow_queue_up", "kept")) == (0, 1)
    assert value(samples, "spark_flow_depth_messages", "gone") is None
    assert value(samples, "spark_flow_depth_messages", "kept", "default") == 0


def test_no_storage_option_or_secret_in_the_metrics(home: str) -> None:
    secret = "NOT-A-REAL-SECRET-7f3a9c"
    make_queue(home, "events")
    text = generate_latest_for(home, {"aws_secret_access_key": secret, "aws_access_key_id": "AKIA-NOT-REAL"})
    assert secret not in text and "AKIA-NOT-REAL" not in text
    assert "spark_flow_depth_messages{" in text


def generate_latest_for(home: str, storage_options: dict[str, str]) -> str:
    return exposition(look(home, storage_options)).decode()


def test_the_metric_names_follow_prometheus_conventions() -> None:
    """Base units in names, ``_total`` on counters only, a help text for each."""
    names = metric_names()
    assert len(names) == len(set(names))
    for name, kind, labels, text in METRICS:
        assert name.startswith("spark_flow_") and text.endswith(".")
        assert name.endswith("_total") is False
        assert labels[0] == "home"
        if kind == "gauge" and "timestamp" in name:
            assert name.endswith("_timestamp_seconds")
    assert {"spark_flow_depth_messages", "spark_flow_depth_bytes", "spark_flow_oldest_message_age_seconds",
            "spark_flow_flow_stopped", "spark_flow_flow_stopped_total", "spark_flow_producers_held",
            "spark_flow_consumer_stalled", "spark_flow_stop_messages", "spark_flow_resume_messages",
            "spark_flow_stop_bytes", "spark_flow_resume_bytes", "spark_flow_stop_age_seconds",
            "spark_flow_resume_age_seconds"} <= set(names)


def test_an_empty_home_is_served(home: str) -> None:
    samples = scrape(home)
    assert value(samples, "spark_flow_queues") == 0
    assert datetime.now(UTC)  # nothing else to read: no queue, no status table
    assert value(samples, "spark_flow_status_updated_timestamp_seconds") is None
