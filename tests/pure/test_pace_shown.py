"""The pace in force is shown where the flow state is (issue 48, item 3): a paced queue's drain,
admitted rate and producers in the view (``status``, the console), ``why``, the metrics and the
controller's observations, each measured by its process's own looks at the queue, without Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.homes import enqueue, make_queue
from support.streams import wait_until

from spark_flow.controller.observation import as_observation, observe
from spark_flow.ops.metrics import exposition
from spark_flow.ops.view import HomeView, look
from spark_flow.ops.why import explain
from spark_flow.rules.pace import HORIZON, Pace


def test_a_paced_queues_drain_and_pace_are_in_the_view_why_the_metrics_and_the_controllers_look(
        tmp_path: Path) -> None:
    """Two producers wrote 30 messages each, the consumer took the first 30: once two looks a
    second apart have seen it, the drain is 30 messages over that time, the pace that drain
    plus the gap to the target (150) closed over 5 s, shared by the two producers."""
    home = str(tmp_path / "home")
    queue = make_queue(home, "events", {"stopCount": 200, "resumeCount": 100, "pacing": True})
    plain = make_queue(home, "plain", {"stopCount": 200})
    assert look(home).queues["events"].subscriptions[0].drain_rate is None  # one look measures nothing
    enqueue(queue, 30, producer="p1")
    first = queue.refresh()
    enqueue(queue, 30, producer="p2")
    queue.acknowledge("default", first)
    views: list[HomeView] = []
    wait_until(lambda: views.append(look(home)) or views[-1].queues["events"].subscriptions[0].drain_rate is not None,
               10, interval=0.05)
    view = views[-1]
    sub = view.queues["events"].subscriptions[0]
    assert sub.drain_rate is not None and 0 < sub.drain_rate <= 30
    assert sub.pace == Pace(sub.drain_rate, pytest.approx(sub.drain_rate + (150 - 30) / HORIZON), 2, 1, 2)
    assert view.queues["plain"].subscriptions[0].pace is None and plain.settings().pacing is False

    [stage] = explain(view, "events")
    assert f"paced: producers admitted at {sub.pace.rate:.1f} messages/s, drained at {sub.drain_rate:.1f} " \
           "messages/s, shared by 2" in stage.line()
    text = exposition(view).decode()
    labels = f'{{home="{home}",queue="events",subscription="default"}}'
    for name, value in (("spark_flow_drain_messages_per_second", sub.drain_rate),
                        ("spark_flow_admitted_messages_per_second", sub.pace.rate),
                        ("spark_flow_pacing_producers", 2)):
        found = re.search(rf"^{name}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
        assert found is not None and float(found[1]) == pytest.approx(value), name
    assert f'spark_flow_admitted_messages_per_second{{home="{home}",queue="plain"' not in text  # not paced

    [observed] = [as_observation(row) for row in observe({"events": queue.path}, {})]
    assert observed["drain_rate"] is not None and observed["admitted_rate"] is not None
    assert observed["pacing_producers"] == 2
