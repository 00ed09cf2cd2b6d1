"""The subscriptions table: ack positions and flow state of a queue's subscriptions, on a real
Delta table written with deltalake (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_flow.exceptions import SubscriptionInUseError, SubscriptionNotFoundError
from spark_flow.records.subscriptions import SubscriptionTable, _schema
from spark_flow.rules.depth import Position


def test_create_table_and_subscription_once(subs: SubscriptionTable) -> None:
    assert not subs.create_table(), "the table exists already"
    assert subs.create("default", 4)
    assert not subs.create("default", 9), "an existing subscription is kept as it is"
    sub = subs.get("default")
    assert (sub.name, sub.position, sub.flow_stopped, sub.flow_stopped_count, sub.downstream) == ("default", 4, False, 0, ())
    assert sub.created_at is not None and sub.reader is None


def test_acknowledge_moves_forward_only_and_counts_discarded(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    assert subs.acknowledge("default", 5, discarded=2)
    assert not subs.acknowledge("default", 3), "never backward"
    assert not subs.acknowledge("default", 5), "a replayed acknowledgement changes nothing"
    assert subs.acknowledge("default", 8, discarded=1)
    sub = subs.get("default")
    assert (sub.position, sub.discarded_count) == (8, 3)


def test_acked_at_is_when_the_position_last_moved(subs: SubscriptionTable) -> None:
    """A stall's clock: a flow transition or a claim does not move it, an acknowledgement does."""
    subs.create("default", 0)
    created = subs.get("default").acked_at
    assert created is not None
    subs.transition(subs.get("default"), True, 1, "{}")
    subs.claim("default", "query-a", timeout=60)
    assert subs.get("default").acked_at == created
    subs.acknowledge("default", 3, reader="query-a")
    assert subs.get("default").acked_at > created


def test_acknowledging_a_position_reached_writes_nothing(subs: SubscriptionTable) -> None:
    """A source acknowledges each batch twice (at the next batch's start and in ``commit``):
    the second is answered from the table as read, no MERGE and no commit, and is still
    refused to a reader that lost the claim."""
    subs.create("default", 0)
    subs.claim("default", "query-a", timeout=60)
    assert subs.acknowledge("default", Position(5, 10), reader="query-a")
    version = subs._table.open().version()
    assert not subs.acknowledge("default", Position(5, 10), reader="query-a")
    assert not subs.acknowledge("default", 5, reader="query-a")
    assert subs._table.open().version() == version, "no MERGE for a position already reached"
    with pytest.raises(SubscriptionInUseError):
        subs.acknowledge("default", 4, reader="query-b")


def test_acknowledge_inside_a_commit(subs: SubscriptionTable) -> None:
    """A position inside a commit is after the version before it and before the version itself."""
    subs.create("default", 4)
    assert subs.acknowledge("default", Position(4, 120))
    assert not subs.acknowledge("default", Position(4, 100)), "never backward inside a commit"
    assert not subs.acknowledge("default", 4), "nor to the commit before"
    assert subs.acknowledge("default", Position(4, 240))
    assert subs.acknowledge("default", 5)
    assert subs.get("default").acknowledged == Position(5, 0)


def test_a_table_without_index_reads_whole_commit_positions_and_takes_one(tmp_path: Path) -> None:
    """Subscriptions an older spark-flow wrote (no ``index`` column) are at whole commits; the
    first acknowledgement inside a commit adds the column."""
    location = str(tmp_path / "subscriptions")
    old = _schema().remove(_schema().get_field_index("index"))
    write_deltalake(location, pa.Table.from_pylist(
        [{"name": "default", "position": 3, "flow_stopped": False, "flow_stopped_count": 0, "discarded_count": 0}],
        schema=old))
    subs = SubscriptionTable(location, "q")
    assert subs.get("default").acknowledged == Position(3)
    assert subs.acknowledge("default", Position(3, 7))
    assert subs.get("default").acknowledged == Position(3, 7)


def test_get_and_acknowledge_an_unknown_subscription_name_the_known_ones(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    with pytest.raises(SubscriptionNotFoundError, match=r"'audit' does not exist on queue 'q'.*'default'"):
        subs.get("audit")
    with pytest.raises(SubscriptionNotFoundError):
        subs.acknowledge("audit", 3)


def test_a_second_table_handle_sees_changes_made_by_another(subs: SubscriptionTable) -> None:
    other = SubscriptionTable(subs.location, "q")  # as another process has it
    subs.create("default", 0)
    assert [s.name for s in other.list()] == ["default"]
    subs.acknowledge("default", 7)
    assert other.get("default").position == 7


def test_claim_refuses_a_live_reader_and_acknowledges_only_for_the_holder(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    subs.claim("default", "query-a", timeout=60)
    subs.claim("default", "query-a", timeout=60)  # the holder claims again: fine
    with pytest.raises(SubscriptionInUseError, match="query-a"):
        subs.claim("default", "query-b", timeout=60)  # query-a's process (this one) is alive
    with pytest.raises(SubscriptionInUseError):
        subs.acknowledge("default", 3, reader="query-b")
    assert subs.acknowledge("default", 3, reader="query-a")
    sub = subs.get("default")
    assert (sub.position, sub.reader) == (3, "query-a") and sub.reader_seen is not None


def test_claim_takes_over_a_reader_not_seen_within_the_timeout(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    subs.claim("default", "query-a", timeout=60)
    subs.claim("default", "query-b", timeout=0)
    assert subs.get("default").reader == "query-b"
    with pytest.raises(SubscriptionInUseError):
        subs.acknowledge("default", 1, reader="query-a")


def test_transition_is_a_compare_and_set_on_the_state_read(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    before = subs.get("default")
    made = subs.transition(before, True, 1, '{"depth_count": 6}')
    assert subs.transition(before, True, 1, "{}") is None, "another gate recorded it first: the state read is stale"
    stopped = subs.get("default")
    assert made == stopped and (stopped.flow_stopped, stopped.flow_stopped_count) == (True, 1)
    assert stopped.last_transition is not None and stopped.last_transition_detail == '{"depth_count": 6}'
    assert subs.transition(stopped, False, 1, "{}")
    assert (subs.get("default").flow_stopped, subs.get("default").flow_stopped_count) == (False, 1)


def test_add_downstream_keeps_what_was_recorded_before(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    subs.add_downstream("default", ["/q/b", "/q/a"])
    subs.add_downstream("default", ("/q/c", "/q/a"))
    assert subs.get("default").downstream == ("/q/a", "/q/b", "/q/c")


def test_drop_removes_the_subscription(subs: SubscriptionTable) -> None:
    subs.create("default", 0)
    subs.create("audit", 0)
    subs.drop("audit")
    assert [s.name for s in subs.list()] == ["default"]
    with pytest.raises(SubscriptionNotFoundError):
        subs.drop("audit")
