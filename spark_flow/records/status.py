"""The controller's tables under ``spark.flow.home``: status and history.

The status table is the Qpid QMF queue object as a Delta table: one row per queue and
subscription, upserted by the controller every micro-batch. The history table keeps a sample
per queue and subscription per controller micro-batch plus every transition and command, for
plots; it is appended once per controller batch (a Delta app transaction). Both take the
columns a newer spark-flow writes (``stop_age``, ...) into tables an older one created.

A process keeps its handle on each and catches it up at each write: loaded afresh at every
controller batch, a table would replay its log from its last checkpoint each time (two loads
were a quarter of the controller's writes at 1,000 queues).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_flow.records.home import control_path
from spark_flow.rules.flow_state import THRESHOLD_COLUMNS
from spark_flow.store.handles import shared
from spark_flow.store.table import ALL, Merge, arrow_fields, sql_string
from spark_flow.store.tables import RecordTable

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_flow.store.table import Table


def _flow_fields() -> list[pa.Field]:
    """What a status row and a history row both say: depth (count, size, the oldest message's
    age), thresholds (ages in seconds), flow state, the drain rate (messages a second) and, for a
    paced queue, the rate its producers are admitted at and how many share it."""
    import pyarrow as pa

    return [pa.field("depth_count", pa.int64()), pa.field("depth_size", pa.int64()), *arrow_fields(THRESHOLD_COLUMNS),
        pa.field("oldest_message_age_seconds", pa.float64()),
        pa.field("flow_stopped", pa.bool_()), pa.field("flow_stopped_count", pa.int64()),
        pa.field("drain_rate", pa.float64()), pa.field("admitted_rate", pa.float64()),
        pa.field("pacing_producers", pa.int64())]


def status_schema() -> pa.Schema:
    """One row per queue and subscription, as the controller last saw it."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([
        pa.field("queue", pa.string(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        *_flow_fields(),
        pa.field("last_transition", ts),
        pa.field("consumer_stalled", pa.bool_()),
        pa.field("producers_stopped", pa.bool_()),
        pa.field("producers_held", pa.bool_()),
        pa.field("held_since", ts),
        pa.field("position", pa.int64()),
        pa.field("latest", pa.int64()),
        pa.field("updated_at", ts),
        pa.field("discarded_count", pa.int64()),
        pa.field("expired_count", pa.int64()),
        pa.field("dead_lettered_count", pa.int64()),
    ])


def history_schema() -> pa.Schema:
    """A sample, a transition or a command, by time."""
    import pyarrow as pa

    return pa.schema([
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("queue", pa.string(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        *_flow_fields(),
        pa.field("producers_stopped", pa.bool_()),
        pa.field("detail", pa.string()),
    ])


def control_table(home: str, name: str, storage_options: Mapping[str, str] | None = None) -> RecordTable:
    """The process's handle on the control table ``name`` (``status``, ``history``) of ``home``."""
    return shared("control table", control_path(home, name), storage_options, RecordTable)


def write_status(home: str, rows: Sequence[Mapping[str, Any]], gone: Sequence[tuple[str, str]],
                 storage_options: Mapping[str, str] | None = None) -> None:
    """Upsert status rows by (queue, subscription) and delete the rows of subscriptions that are gone."""
    import pyarrow as pa

    table = control_table(home, "status", storage_options)
    data = pa.Table.from_pylist(list(rows), schema=status_schema())
    table.create(status_schema())
    if rows:
        table.merge(data, Merge("t.queue = s.queue AND t.subscription = s.subscription", update=ALL, insert=ALL),
                    merge_schema=True)
    for queue, subscription in gone:
        table.delete(f"queue = {sql_string(queue)} AND subscription = {sql_string(subscription)}")


def append_history(home: str, rows: Sequence[Mapping[str, Any]], app_id: str, version: int,
                   storage_options: Mapping[str, str] | None = None) -> bool:
    """Append history rows once per (``app_id``, ``version``): a replayed controller batch
    finds its transaction in the table's log and writes nothing. True if it wrote."""
    import pyarrow as pa

    handle = control_table(home, "history", storage_options)
    table = handle.open()
    if table is not None:
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            rows = _missing_transitions(table, rows)
            if rows:  # a replayed batch saw transitions the first attempt did not: add only those
                handle.append(pa.Table.from_pylist(rows, schema=history_schema()), merge_schema=True)
            return False
    if not rows:
        return False
    handle.append(pa.Table.from_pylist(list(rows), schema=history_schema()), transaction=(app_id, version),
                  merge_schema=True)
    return True


TRANSITIONS = ("stopped", "resumed")


def _missing_transitions(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The transition rows not in the history yet; a transition is unique by queue, subscription,
    event and flowStoppedCount (the n-th stop and the resume after it happen once)."""
    wanted = [dict(r) for r in rows if r["event"] in TRANSITIONS]
    if not wanted:
        return []
    key = ("queue", "subscription", "event", "flow_stopped_count")
    seen = {tuple(r[k] for k in key) for r in table.rows(list(key))
            if r["event"] in TRANSITIONS}
    return [r for r in wanted if tuple(r[k] for k in key) not in seen]
