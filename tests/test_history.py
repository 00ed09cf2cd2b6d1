"""A queue's transition history: each STOPPED / RESUMED recorded once, on a real Delta table
written with deltalake (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from spark_flow.history import HistoryTable
from spark_flow.ledger import Depth
from spark_flow.state import Thresholds
from spark_flow.subscriptions import Subscription

THRESHOLDS = Thresholds(5, 2, 0, 0)
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def state(stopped: bool, count: int, name: str = "default", created: datetime = CREATED) -> Subscription:
    return Subscription(name, 0, flow_stopped=stopped, flow_stopped_count=count, created_at=created)


def transitions(history: HistoryTable) -> list[tuple[str, bool, int, int]]:
    return [(r["subscription"], r["flow_stopped"], r["flow_stopped_count"], r["depth_count"]) for r in history.read()]


@pytest.fixture
def history(tmp_path: Path) -> HistoryTable:
    return HistoryTable(str(tmp_path / "history"), "q")


def test_no_table_no_transitions(history: HistoryTable) -> None:
    assert history.read() == []


def test_a_transition_is_recorded_once_by_every_process(history: HistoryTable) -> None:
    history.record(state(True, 1), Depth(6, 60), THRESHOLDS)
    HistoryTable(history.location, "q").record(state(True, 1), Depth(7, 70), THRESHOLDS)  # another gate
    history.record(state(True, 1), Depth(8, 80), THRESHOLDS)
    [row] = history.read()
    assert (row["queue"], row["subscription"], row["flow_stopped"], row["flow_stopped_count"]) == ("q", "default", True, 1)
    assert (row["depth_count"], row["depth_size"], row["stop_count"], row["resume_count"]) == (6, 60, 5, 2)


def test_read_is_in_time_order(history: HistoryTable) -> None:
    history.record(state(True, 1), Depth(6, 0), THRESHOLDS)
    history.record(state(False, 1), Depth(1, 0), THRESHOLDS)
    history.record(state(True, 1, "audit"), Depth(9, 0), THRESHOLDS)
    history.record(state(True, 2), Depth(6, 0), THRESHOLDS)
    assert transitions(history) == [("default", True, 1, 6), ("default", False, 1, 1), ("audit", True, 1, 9),
                                    ("default", True, 2, 6)]


def test_ensure_adds_a_missing_row_once_and_none_for_count_zero(history: HistoryTable) -> None:
    history.record(state(True, 1), Depth(6, 0), THRESHOLDS)
    observer = HistoryTable(history.location, "q")  # a process that did not make these transitions
    observer.ensure(state(False, 0), Depth(0, 0), THRESHOLDS)  # never stopped: nothing to record
    observer.ensure(state(True, 1), Depth(9, 0), THRESHOLDS)  # recorded already: kept as it was
    assert observer.unconfirmed("default", False, 1)
    observer.ensure(state(False, 1), Depth(1, 0), THRESHOLDS)  # its maker was killed before recording it
    assert not observer.unconfirmed("default", False, 1)
    observer.ensure(state(False, 1), Depth(0, 0), THRESHOLDS)
    assert transitions(history) == [("default", True, 1, 6), ("default", False, 1, 1)]


def test_a_recreated_subscription_records_its_transitions_again(history: HistoryTable) -> None:
    history.record(state(True, 1), Depth(6, 0), THRESHOLDS)
    history.record(state(True, 1, created=datetime.now(UTC)), Depth(7, 0), THRESHOLDS)
    assert transitions(history) == [("default", True, 1, 6), ("default", True, 1, 7)]
