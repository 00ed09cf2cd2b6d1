"""The controller's foreachBatch: it applies operator commands, records the controller's own
transitions, evicts stalled subscriptions (``stalledConsumerPolicy=skip``), steps the home's
flow state (home-wide limits) and writes the status and history tables. Every write is safe to
repeat, so a replayed batch changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_flow.controller.observation import now_ms
from spark_flow.controller.step import step_rows
from spark_flow.exceptions import QueueNotFoundError, SubscriptionNotFoundError
from spark_flow.flow.homeflow import HOME_QUEUE, HOME_ROW, home_depth, open_home
from spark_flow.flow.queue import open_queue
from spark_flow.records.commands import HOME_COMMANDS, command_settings, with_settings
from spark_flow.records.status import append_history, write_status
from spark_flow.records.subscriptions import Subscription
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import THRESHOLD_FIELDS, FlowState, Thresholds, producers_held
from spark_flow.rules.settings import queue_settings
from spark_flow.spark.session import streaming_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("spark_flow.controller.query")


class ControllerSink:
    """foreachBatch of the controller. Every write is safe to repeat: commands apply by id
    (an older id never overwrites a newer one), transitions are compare-and-set, status rows
    are upserts, and history is appended once per batch id (a Delta app transaction)."""

    def __init__(self, home: str, query_name: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.query_name = query_name
        self.storage_options = dict(storage_options or {})
        self._home_shown = False  # whether this controller wrote the home's status row

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.write(batch.sparkSession, step_rows(batch.toArrow()), batch_id)

    def write(self, spark: SparkSession, rows: list[dict[str, Any]], batch_id: int) -> None:
        """Apply, record and write what one micro-batch's step gave (rows of
        :data:`~spark_flow.controller.step.ROW_SCHEMA`)."""
        query = streaming_query(spark, self.query_name)
        query_id = query.id if query is not None else self.query_name
        history = []
        for row in sorted((r for r in rows if r["kind"] == "command"), key=lambda r: r["command_id"]):
            history.append(self._apply(row))
        statuses = [r for r in rows if r["kind"] == "status" and self._settle(r)]
        events = [r for r in rows if r["kind"] == "event"]
        for row in events:
            log.info("queue %r subscription %r %s (%s): depth %d, flowStoppedCount %d", row["queue"],
                     row["subscription"], row["event"].upper(), row["detail"], row["depth_count"],
                     row["flow_stopped_count"])
        gone = [(r["queue"], r["subscription"]) for r in rows if r["kind"] == "gone"]
        home = self._home(statuses)
        if home is None and self._home_shown:
            gone.append((HOME_QUEUE, HOME_ROW))  # its limits were removed
        self._home_shown = home is not None
        statuses += [home] if home is not None else []
        write_status(self.home, [_status_row(r) for r in statuses], gone, self.storage_options)
        history += [_history_row(r, "sample") for r in statuses] + [_history_row(r, r["event"]) for r in events]
        append_history(self.home, history, f"spark-flow-controller/{query_id}", batch_id, self.storage_options)

    def _home(self, statuses: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Step the home's flow state with its depth as this batch observed it (the sum over its
        queues of each one's deepest subscription, per measure), as its gates do; its status
        row (queue ``>``, subscription ``home``), None while the home has no limits."""
        queues: dict[str, list[Depth]] = {}
        for row in statuses:
            queues.setdefault(row["queue"], []).append(Depth(row["depth_count"], row["depth_size"]))
        depth = home_depth(queues.values())
        home = open_home(self.home, self.storage_options).step(depth)
        if not home.limited:
            return None
        transition = home.last_transition
        return {"kind": "status", "queue": HOME_QUEUE, "subscription": HOME_ROW, "time": now_ms(),
                "depth_count": depth.count, "depth_size": depth.size, **asdict(home.thresholds),
                "flow_stopped": home.flow_stopped, "flow_stopped_count": home.state.flow_stopped_count,
                "last_transition": int(transition.timestamp() * 1000) if transition else None,
                "producers_stopped": False, "position": None, "latest": None, "stalled": False, "held_since": None}

    def _apply(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one command to one queue; an error is recorded, not raised (it was checked when
        issued). The queue's settings as they will be are checked whole before anything is
        written, so a command is applied whole or not at all."""
        issued = json.loads(row["settings"] or "{}")
        detail = f"command {row['command_id']}: {row['command']} {json.dumps(issued) if issued else ''}".strip()
        settings = command_settings(row["command"], issued)
        try:
            if row["command"] in HOME_COMMANDS:  # applied when issued; again changes nothing
                open_home(self.home, self.storage_options).settings_table.apply(settings, row["command_id"])
                return _history_row({**row, "time": row["time"] or now_ms()}, "command", detail)
            if row["path"] is None:
                raise LookupError(f"no registered queue matches {row['queue']!r}")
            queue = open_queue(row["path"], self.storage_options)
            runtime = queue.runtime_settings
            if row["command_id"] > runtime.applied():  # a replayed batch's commands are in already
                queue_settings(queue.name, queue.properties(), with_settings(runtime.current(), settings))
                runtime.apply(settings, row["command_id"])
            log.info("queue %r: applied %s", row["queue"], detail)
            event = "command"
        except Exception as error:
            log.error("queue %r: %s failed: %s", row["queue"], detail, error)
            event, detail = "command-failed", f"{detail}: {error}"
        return _history_row({**row, "time": row["time"] or now_ms()}, event, detail)

    def _settle(self, row: Mapping[str, Any]) -> bool:
        """Record the row's transition and evict a stalled subscription it skips; False (logged)
        for a queue deleted since this batch looked at it: it gets no status row, and its keys
        time out."""
        try:
            self._transition(row)
            if row["event"] == "evict":
                open_queue(row["path"], self.storage_options).acknowledge(row["subscription"], row["latest"],
                                                                           discarded=row["depth_count"])
        except QueueNotFoundError as error:
            log.warning("queue %r: %s", row["queue"], error)
            return False
        return True

    def _transition(self, row: Mapping[str, Any]) -> None:
        """Record the controller's transition in the subscriptions table, if nobody did yet, at
        its step's time (the status row's ``last_transition`` and ``held_since``), and make sure
        the queue's history has the row of the state it adopted and of its own."""
        queue = open_queue(row["path"], self.storage_options)
        depth = Depth(row["depth_count"], row["depth_size"], row["oldest_enqueue"])
        name, recorded = row["subscription"], FlowState(row["recorded_stopped"], row["recorded_count"])
        after, state = FlowState(row["flow_stopped"], row["flow_stopped_count"]), recorded
        before = Subscription(name, row["position"], row["recorded_stopped"], row["recorded_count"])
        if after != recorded and queue.recorder.record(before, after, depth, Thresholds.from_row(row),
                                                       _ts(row["time"])) is not None:
            state = after
        if queue.history.unconfirmed(name, state.flow_stopped, state.flow_stopped_count):
            # read the row as it is now, with its creation time (its history counts from there)
            with contextlib.suppress(SubscriptionNotFoundError):
                queue.history.ensure(queue.subscriptions.get(name), depth, Thresholds.from_row(row))


def _ts(ms: int | None) -> Any:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _flow_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a status row and a history row both say (:func:`spark_flow.records.status.flow_fields`)."""
    oldest = row.get("oldest_enqueue")
    return {
        **{k: row.get(k) for k in ("depth_count", "depth_size", *THRESHOLD_FIELDS, "flow_stopped",
                                   "flow_stopped_count", "drain_rate", "admitted_rate", "pacing_producers")},
        "oldest_message_age_seconds": None if oldest is None else Depth(0, 0, oldest).age(row["time"]),
    }


def _status_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **{k: row.get(k) for k in ("queue", "subscription", "producers_stopped", "position", "latest",
                                   "discarded_count", "expired_count", "dead_lettered_count")},
        **_flow_fields(row),
        "last_transition": _ts(row["last_transition"]),
        "consumer_stalled": row["stalled"],
        "producers_held": producers_held(flow_stopped=(bool(row["flow_stopped"]),),
                                         producers_stopped=bool(row["producers_stopped"])),
        "held_since": _ts(row["held_since"]), "updated_at": _ts(row["time"]),
    }


def _history_row(row: Mapping[str, Any], event: str, detail: str | None = None) -> dict[str, Any]:
    return {
        **{k: row.get(k) for k in ("queue", "producers_stopped")}, **_flow_fields(row),
        "time": _ts(row["time"]), "subscription": row.get("subscription") or "", "event": event,
        "detail": detail if detail is not None else row.get("detail"),
    }
