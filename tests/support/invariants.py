"""Checks of DESIGN section 3's invariants on what a queue recorded, shared by the test modules
that drive queues different ways (in the suite's session, through the README's jobs)."""

from __future__ import annotations

from spark_flow.rules.state import Thresholds


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
