"""A queue's transition history: each STOPPED / RESUMED recorded once, on a real Delta table
written with deltalake (no Spark)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spark_flow.records.subscriptions import Subscription
from spark_flow.records.transitions import TransitionTable, transition_detail
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import Thresholds

THRESHOLDS = Thresholds(5, 2, 0, 0)
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def state(stopped: bool, count: int, name: str = "default", created: datetime = CREATED) -> Subscription:
    return Subscription(name, 0, flow_stopped=stopped, flow_stopped_count=count, created_at=created)


def made(sub: Subscription, depth: Depth, thresholds: Thresholds = THRESHOLDS) -> Subscription:
    """``sub`` as a transition just left it: when, and what it saw."""
    now = datetime.now(UTC)
    return replace(sub, last_transition=now, last_transition_detail=transition_detail(depth, thresholds, now))


def transitions(history: TransitionTable) -> list[tuple[str, bool, int, int]]:
    return [(r["subscription"], r["flow_stopped"], r["flow_stopped_count"], r["depth_count"]) for r in history.read()]


@pytest.fixture
def history(tmp_path: Path) -> TransitionTable:
    return TransitionTable(str(tmp_path / "history"), "q")


def test_no_table_no_transitions(history: TransitionTable) -> None:
    assert history.read() == []


def test_a_transition_is_recorded_once_by_every_process(history: TransitionTable) -> None:
    history.record(made(state(True, 1), Depth(6, 60)))
    TransitionTable(history.location, "q").record(made(state(True, 1), Depth(7, 70)))  # another gate
    history.record(made(state(True, 1), Depth(8, 80)))
    [row] = history.read()
    assert (row["queue"], row["subscription"], row["flow_stopped"], row["flow_stopped_count"]) == ("q", "default", True, 1)
    assert (row["depth_count"], row["depth_size"], row["stop_count"], row["resume_count"]) == (6, 60, 5, 2)


def test_read_is_in_time_order(history: TransitionTable) -> None:
    history.record(made(state(True, 1), Depth(6, 0)))
    history.record(made(state(False, 1), Depth(1, 0)))
    history.record(made(state(True, 1, "audit"), Depth(9, 0)))
    history.record(made(state(True, 2), Depth(6, 0)))
    assert transitions(history) == [("default", True, 1, 6), ("default", False, 1, 1), ("audit", True, 1, 9),
                                    ("default", True, 2, 6)]


def test_ensure_adds_a_missing_row_once_and_none_for_count_zero(history: TransitionTable) -> None:
    history.record(made(state(True, 1), Depth(6, 0)))
    observer = TransitionTable(history.location, "q")  # a process that did not make these transitions
    observer.ensure(state(False, 0), Depth(0, 0), THRESHOLDS)  # never stopped: nothing to record
    observer.ensure(state(True, 1), Depth(9, 0), THRESHOLDS)  # recorded already: kept as it was
    assert observer.unconfirmed("default", False, 1)
    observer.ensure(state(False, 1), Depth(1, 0), THRESHOLDS)  # its maker was killed before recording it
    assert not observer.unconfirmed("default", False, 1)
    observer.ensure(state(False, 1), Depth(0, 0), THRESHOLDS)
    observer.ensure(made(state(True, 2), Depth(7, 0)), Depth(4, 0), THRESHOLDS)  # its maker is not there yet
    assert transitions(history) == [("default", True, 1, 6), ("default", False, 1, 1), ("default", True, 2, 7)]


def test_a_recreated_subscription_records_its_transitions_again(history: TransitionTable) -> None:
    history.record(made(state(True, 1), Depth(6, 0)))
    history.record(made(state(True, 1, created=datetime.now(UTC)), Depth(7, 0)))
    assert transitions(history) == [("default", True, 1, 6), ("default", True, 1, 7)]


def test_tables_an_older_version_created_take_the_age_columns(tmp_path: Path) -> None:
    """A queue history, a status and a controller history table without the age columns (as
    spark-flow wrote them before stopAge): a transition, a status upsert and a history append
    add the columns, and the old rows read them as null."""
    from deltalake import DeltaTable, write_deltalake

    from spark_flow.records.home import control_path
    from spark_flow.records.status import append_history, write_status
    from spark_flow.store.handles import forget

    def write_twice(location: str, write: Callable[[], object]) -> list[dict]:
        """``write`` once into a table as an older version made it (no age columns), then again,
        as a process started after the upgrade does (no handle of the table it replaced)."""
        write()
        made = DeltaTable(location).to_pyarrow_table()
        shutil.rmtree(location)
        write_deltalake(location, made.drop_columns([c for c in made.column_names if "age" in c]))
        forget("control table", location)
        write()
        return DeltaTable(location).to_pyarrow_table().to_pylist()

    queue_history = TransitionTable(str(tmp_path / "history"), "q")
    rows = write_twice(queue_history.location, lambda: TransitionTable(queue_history.location, "q").record(
        made(state(True, 1, created=datetime.now(UTC)), Depth(1, 10, 0), Thresholds(stop_age=3.0, resume_age=1.0))))
    assert sorted((r["stop_age"] or 0, r["depth_age"] is None) for r in rows) == [(0, True), (3.0, False)]

    home = str(tmp_path / "home")
    row = {"time": CREATED, "queue": "q", "subscription": "default", "event": "sample", "depth_count": 1,
           "flow_stopped": True, "flow_stopped_count": 1, "stop_age": 3.0, "resume_age": 1.0,
           "oldest_message_age_seconds": 4.5, "updated_at": CREATED}
    status = write_twice(control_path(home, "status"), lambda: write_status(home, [row], []))
    assert [(r["stop_age"], r["oldest_message_age_seconds"]) for r in status] == [(3.0, 4.5)]
    versions = iter(range(2))
    history = write_twice(control_path(home, "history"),
                          lambda: append_history(home, [{k: v for k, v in row.items() if k != "updated_at"}],
                                                 "controller", next(versions)))
    assert sorted((r["stop_age"] or 0, r["oldest_message_age_seconds"] or 0) for r in history) == [(0, 0), (3.0, 4.5)]


def test_the_first_transition_recorded_by_two_processes_at_once_is_one_row(tmp_path: Path) -> None:
    """The gate and the controller of one process (or two processes) record a home's first
    transition at the same moment, each creating the history table: delta-rs retries the losing
    creation as an append, so a table created with the row would hold it twice."""
    stopped = made(state(True, 1, "home"), Depth(9))
    for attempt in range(8):
        location = str(tmp_path / f"history-{attempt}")
        barrier = threading.Barrier(2)

        def record(location: str = location, barrier: threading.Barrier = barrier) -> None:
            table = TransitionTable(location, ">")
            barrier.wait()
            table.record(stopped)

        threads = [threading.Thread(target=record) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert transitions(TransitionTable(location, ">")) == [("home", True, 1, 9)], f"attempt {attempt}"
