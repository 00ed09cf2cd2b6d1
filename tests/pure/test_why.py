"""``spark-flow why``: from a held producer's queue down a chain of queues to the stage that causes
the hold, on real tables (no Spark: queues written by deltalake, transitions recorded by real
gates); the console marks the same stages (test_console)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.homes import acknowledge_all, chain, enqueue, look_as_a_producer, make_queue

from spark_flow.exceptions import QueueNotFoundError
from spark_flow.ops.admin import FlowAdmin
from spark_flow.ops.view import look
from spark_flow.ops.why import edges, explain, root_causes


def test_a_three_queue_chain_is_followed_to_the_stage_whose_consumer_is_not_backpressured(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    chain(home, ["ingest", "events", "enriched"])
    stages = explain(look(home), "ingest")
    assert [(s.queue, s.level, s.held, s.backpressured_by, s.root_cause) for s in stages] == [
        ("ingest", 0, True, ("events",), False), ("events", 1, True, ("enriched",), False),
        ("enriched", 2, True, (), True)]
    assert "consumer of subscription default is not backpressured" in stages[-1].causes[0]
    assert stages[0].line().startswith("ingest: holds its producers: subscription default flow-stopped "
                                       "(depth 8 messages, 80 bytes; stop 5 / resume 2 messages); "
                                       "its consumer is backpressured by events")
    assert stages[2].line().startswith("    enriched: holds its producers")
    assert root_causes(look(home)) == {"enriched": [stages[-1].causes[0]]}
    assert edges(look(home)) == [("events", "default", "enriched", True), ("ingest", "default", "events", True)]


def test_the_root_cause_says_when_its_consumer_last_acknowledged_or_that_it_never_did(tmp_path: Path) -> None:
    """A subscription's row records its creation as its ``acked_at`` too: that is no
    acknowledgement."""
    home = str(tmp_path / "home")
    [queue] = chain(home, ["enriched"])
    [stage] = explain(look(home), "enriched")
    assert stage.causes[0].endswith(", never acknowledged"), stage.causes[0]
    first = queue.refresh()
    enqueue(queue, 8)
    queue.acknowledge("default", first)
    acked = queue.subscriptions.get("default").acked_at
    assert look_as_a_producer(queue).held and acked is not None
    [stage] = explain(look(home), "enriched")
    assert stage.causes[0].endswith(f", last acknowledgement at {acked:%Y-%m-%dT%H:%M:%S}Z"), stage.causes[0]


def test_the_cause_moves_when_the_root_stage_drains(tmp_path: Path) -> None:
    """Once the last stage's consumer catches up, the middle stage's consumer is no longer
    backpressured: it is the root cause now."""
    home = str(tmp_path / "home")
    _, _, enriched = chain(home, ["ingest", "events", "enriched"])
    acknowledge_all(enriched)
    look_as_a_producer(enriched)
    stages = explain(look(home), "ingest")
    assert [(s.queue, s.root_cause) for s in stages] == [("ingest", False), ("events", True)]
    assert list(root_causes(look(home))) == ["events"]
    assert explain(look(home), "enriched")[0].line().startswith(
        "enriched: does not hold its producers (depth 0 messages, 0 bytes; stop 5 / resume 2 messages)")


def test_an_operator_stop_and_the_home_are_causes_of_their_own(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    paused = make_queue(home, "paused")
    paused.runtime_settings.apply({"producersStopped": "true"}, 0)  # stop-producers, as the controller applies it
    [stage] = explain(look(home), "paused")
    assert stage.reasons == ("stopped by an operator (stop-producers)",) and stage.root_cause
    FlowAdmin(home).set_home(homeStopCount=3)
    other = make_queue(home, "other")
    enqueue(other, 5)
    look_as_a_producer(other)
    [stage] = explain(look(home), "other")
    assert stage.held and "home-wide limits" in stage.reasons[0] and "home's depth (5 messages" in stage.causes[0]


def test_a_cycle_is_followed_once(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    first, second = chain(home, ["first", "second"])
    second.subscriptions.add_downstream("default", [first.path])
    stages = explain(look(home), "first")
    assert [(s.queue, s.causes) for s in stages] == [("first", ()), ("second", ("a cycle: first, above, waits on this stage too",))]


def test_an_unknown_queue_names_the_known_ones(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    make_queue(home, "events")
    with pytest.raises(QueueNotFoundError, match=r"'nope' not found: not registered in .*allowed is one of 'events'"):
        explain(look(home), "nope")


def test_a_downstream_queue_of_another_home_is_followed_by_its_path(tmp_path: Path) -> None:
    home, other = str(tmp_path / "home"), str(tmp_path / "other")
    upstream = make_queue(home, "upstream", {"stopCount": 5})
    outside = make_queue(other, "outside", {"stopCount": 5})
    upstream.subscriptions.add_downstream("default", [outside.path])
    for queue in (upstream, outside):
        enqueue(queue, 8)
        look_as_a_producer(queue)
    view = look(home)
    assert list(view.queues) == ["upstream"] and list(view.others) == [outside.path]
    assert [(s.queue, s.root_cause) for s in explain(view, "upstream")] == [("upstream", False), (outside.path, True)]
    assert edges(view) == [("upstream", "default", outside.path, True)]
