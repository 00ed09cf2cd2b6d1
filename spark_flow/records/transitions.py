"""The transition history of one queue: every flow STOPPED / RESUMED, with the depth (count,
size, and ``depth_age``: the oldest message's age in seconds) and the thresholds that caused it, in a small Delta table beside the subscriptions.

A transition is recorded after its compare-and-set into the subscriptions table, so a process
killed between the two leaves a state without its row, and one still between them leaves it
for a while. Every observer therefore makes sure the states it sees have their row
(``ensure``), and a row is inserted only if none shows the same transition yet (a
``deltalake`` MERGE keyed by subscription, direction and flowStoppedCount): gates and
controllers in several processes record each transition once, without a lock and without a
SparkSession. What a transition saw (depth, thresholds: :func:`transition_detail`) is written
with the state it sets, so whoever writes its row writes the depth that caused it, not the one
seen later (a consumer may have drained the queue meanwhile).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_flow.rules.flow_state import THRESHOLD_COLUMNS
from spark_flow.store.table import Merge, arrow_fields, sql_string
from spark_flow.store.tables import Owner, RecordTable

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_flow.records.subscriptions import Subscription
    from spark_flow.rules.depth import Depth
    from spark_flow.rules.flow_state import Thresholds

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("queue", pa.string(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("flow_stopped", pa.bool_(), nullable=False),
        pa.field("flow_stopped_count", pa.int64(), nullable=False),
        pa.field("depth_count", pa.int64(), nullable=False),
        pa.field("depth_size", pa.int64(), nullable=False),
        # counts and sizes were there from the start; the ages came later (older rows have none)
        *(field.with_nullable(field.type != pa.int64()) for field in arrow_fields(THRESHOLD_COLUMNS)),
        pa.field("depth_age", pa.float64()),
    ])


def transition_detail(depth: Depth, thresholds: Thresholds, at: datetime) -> str:
    """What a transition at ``at`` saw, as the subscriptions table keeps it with the state it
    set and its history row shows it: the depth (with the oldest message's age) and the
    thresholds in force."""
    age = depth.age(int(at.timestamp() * 1000))
    return json.dumps({"depth_count": depth.count, "depth_size": depth.size, "depth_age": age, **asdict(thresholds)})


class TransitionTable:
    """Flow transitions of one queue, at ``location`` (written while ``owner``, the queue, is there)."""

    def __init__(self, location: str, queue: str, storage_options: Mapping[str, str] | None = None, *,
                 owner: Owner | None = None) -> None:
        self.location = location
        self.queue = queue
        self._table = RecordTable(location, storage_options, owner=owner)
        self._recorded: set[tuple[str, bool, int]] = set()  # states this process knows have their row

    def record(self, sub: Subscription) -> None:
        """Record the transition that brought ``sub`` to its flow state (as its row has it:
        when, and what it saw), unless a row since the subscription was created shows it already."""
        import pyarrow as pa

        row = {
            "time": sub.last_transition or datetime.now(UTC), "queue": self.queue, "subscription": sub.name,
            "flow_stopped": sub.flow_stopped, "flow_stopped_count": sub.flow_stopped_count,
            **json.loads(sub.last_transition_detail or "{}"),
        }
        rows = pa.Table.from_pylist([row], schema=_schema())
        self._table.create(_schema())
        since = rows.append_column("since", pa.array([sub.created_at or _EPOCH], pa.timestamp("us", tz="UTC")))
        self._table.merge(since, Merge("t.subscription = s.subscription AND t.flow_stopped = s.flow_stopped "
                                       "AND t.flow_stopped_count = s.flow_stopped_count AND t.time >= s.since",
                                       insert={name: f"s.{name}" for name in _schema().names}),
                          merge_schema=True)
        self._recorded.add((sub.name, sub.flow_stopped, sub.flow_stopped_count))

    def ensure(self, sub: Subscription, depth: Depth, thresholds: Thresholds) -> None:
        """Make sure the transition behind ``sub``'s state has its row: the process that made it
        may have been killed before recording it, or not be there yet. Costs a read the first
        time this process sees a state (and a MERGE if its row is missing), nothing after: a
        MERGE that inserts nothing still takes 15 ms where a read takes 3.5 (a new handle each,
        local), and a controller started on a home of 10,000 held queues sees 10,000 states at
        its first look. A state an older spark-flow set has no detail: its row gets ``depth``
        and ``thresholds``, as seen now."""
        if not self.unconfirmed(sub.name, sub.flow_stopped, sub.flow_stopped_count):
            return
        if self._shown(sub):
            self._recorded.add((sub.name, sub.flow_stopped, sub.flow_stopped_count))
            return
        if sub.last_transition_detail is None:
            now = datetime.now(UTC)
            sub = replace(sub, last_transition=now, last_transition_detail=transition_detail(depth, thresholds, now))
        self.record(sub)

    def _shown(self, sub: Subscription) -> bool:
        """Whether a row since ``sub`` was created shows its state (what :meth:`record`'s MERGE
        would find), read."""
        since = sub.created_at or _EPOCH
        return any(row["time"] >= since for row in self._table.rows(
            ["time"], f"subscription = {sql_string(sub.name)} AND flow_stopped = {str(sub.flow_stopped).lower()} "
                      f"AND flow_stopped_count = {int(sub.flow_stopped_count)}"))

    def unconfirmed(self, subscription: str, flow_stopped: bool, flow_stopped_count: int) -> bool:
        """Whether this process has not yet seen the row of this state (count 0 needs none)."""
        return flow_stopped_count > 0 and (subscription, flow_stopped, flow_stopped_count) not in self._recorded

    def read(self) -> list[dict[str, Any]]:
        """Every recorded transition, oldest first."""
        return sorted(self._table.rows(), key=lambda r: (r["time"], r["flow_stopped_count"], not r["flow_stopped"]))
