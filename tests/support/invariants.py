"""Checks of DESIGN section 3's invariants on what a queue recorded, shared by the test modules
that drive queues different ways (in the suite's session, through the README's jobs)."""

from __future__ import annotations

from collections import Counter

from spark_flow.flow.queue import Queue
from spark_flow.rules.flow_state import Thresholds


def assert_transitions_follow_thresholds(transitions: list[dict[str, object]]) -> None:
    """Invariant 8: every recorded STOPPED has a depth above a stop threshold and every RESUMED
    has every configured measure under its resume threshold, with the thresholds then in force."""
    assert transitions
    for row in transitions:
        thresholds, age = Thresholds.from_row(row), row.get("depth_age") or 0.0
        if row["flow_stopped"]:
            assert thresholds.exceeded(row["depth_count"], row["depth_size"], age), row
        else:
            assert thresholds.relieved(row["depth_count"], row["depth_size"], age), row


def stopped_rows(queue: Queue, subscription: str = "default") -> list[int]:
    return [r["flow_stopped_count"] for r in queue.history.read()
            if r["subscription"] == subscription and r["flow_stopped"]]


def assert_flow_stopped_count_right(queue: Queue, subscription: str = "default") -> int:
    """flowStoppedCount = the STOPPED rows of the history, one per count (none doubled or lost)."""
    sub = queue.subscriptions.get(subscription)
    counts = stopped_rows(queue, subscription)
    doubled = [c for c, n in Counter(counts).items() if n > 1]
    assert not doubled, f"STOPPED recorded twice for flowStoppedCount {doubled}"
    assert sorted(counts) == list(range(1, sub.flow_stopped_count + 1)), (
        f"flowStoppedCount {sub.flow_stopped_count}, STOPPED rows {sorted(counts)}")
    return sub.flow_stopped_count
