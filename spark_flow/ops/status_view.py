"""The home as its controller last saw it, from the status table alone: what ``spark-flow serve``
answers a scrape, and a console page's list, with while its own first look at a big home is under way.

That first look opens every queue's tables (about a minute for 10,000 queues on 2 cores); the
status table is one read, and a running controller rewrites it every batch. Its figures are the
controller's, as old as its last write (``spark_flow_look_age_seconds`` says so); what the
status table does not keep (a queue's maximum, a consumer held back by the queues it writes to)
is left out rather than guessed; a queue in it was read by that look (``spark_flow_queue_up``
1), and is held as its rows say (by its own subscriptions or an operator's stop; the home's
stop is the home's row).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_flow.flow.homeflow import HOME_QUEUE
from spark_flow.ops.view import HomeView, QueueView, SubscriptionView
from spark_flow.records.home import control_path
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState, Thresholds
from spark_flow.rules.pace import Pace
from spark_flow.rules.settings import QueueSettings
from spark_flow.store.tables import RecordTable


def status_view(home: str, storage_options: Mapping[str, str] | None = None) -> HomeView | None:
    """The status table's rows as a look at ``home``, as of the controller's last write; None
    while no controller has written one. Read through a handle of its own: the process's shared
    handles belong to the look under way."""
    rows = RecordTable(control_path(home, "status"), storage_options).rows()
    if not rows:
        return None
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_queue.setdefault(row["queue"], []).append(row)
    limited = by_queue.pop(HOME_QUEUE, [None])[0]
    written = max(row["updated_at"] for row in rows)
    queues = {name: _queue(name, sorted(subs, key=lambda r: r["subscription"])) for name, subs in sorted(by_queue.items())}
    if limited is None:
        return HomeView(home, written, queues, status_updated=written, read_from="status")
    return HomeView(home, written, queues, _thresholds(limited), Depth(limited["depth_count"], limited["depth_size"]),
                    FlowState(bool(limited["flow_stopped"]), limited["flow_stopped_count"] or 0),
                    limited["last_transition"], status_updated=written, read_from="status")


def _queue(name: str, rows: list[dict[str, Any]]) -> QueueView:
    """One queue's rows (one a subscription) as its view: every row carries the queue's own figures."""
    first = rows[0]
    settings = QueueSettings(name, _thresholds(first), producers_stopped=bool(first["producers_stopped"]))
    held = [row for row in rows if row["producers_held"]]
    since = [row["held_since"] for row in held if row["held_since"] is not None]
    return QueueView(name, name, settings, first["latest"] if first["latest"] is not None else -1,
                     tuple(_subscription(row) for row in rows), held=bool(held), held_since=min(since, default=None))


def _subscription(row: Mapping[str, Any]) -> SubscriptionView:
    """One subscription's row (when it last acknowledged is not in it; nor is backpressure)."""
    pace = (Pace(row["drain_rate"], row["admitted_rate"], row["pacing_producers"] or 0)
            if row["admitted_rate"] is not None else None)
    return SubscriptionView(row["subscription"], Depth(row["depth_count"] or 0, row["depth_size"] or 0),
                            row["oldest_message_age_seconds"] or 0.0, bool(row["flow_stopped"]),
                            row["flow_stopped_count"] or 0, row["last_transition"], row["position"] or 0,
                            row["discarded_count"] or 0, row["expired_count"] or 0, row["dead_lettered_count"] or 0,
                            acked_at=None, backpressured=None, stalled=bool(row["consumer_stalled"]),
                            drain_rate=row["drain_rate"], pace=pace)


def _thresholds(row: Mapping[str, Any]) -> Thresholds:
    """A row's thresholds (a column an older spark-flow did not write: not used)."""
    def given(name: str) -> Any:
        return row.get(name) or 0

    return Thresholds(int(given("stop_count")), int(given("resume_count")), int(given("stop_size")),
                      int(given("resume_size")), float(given("stop_age")), float(given("resume_age")))
