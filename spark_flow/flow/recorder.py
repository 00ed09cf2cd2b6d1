"""Recording flow transitions, for a queue's subscriptions and for a home alike.

A transition (``flowStopped`` turning on or off, ``flowStoppedCount`` counting the stops) is
written twice: a compare-and-set of the row's flow state (with what it saw: depth and
thresholds), then its line in the transition history. Every process that judges a queue (gates,
gated sources, the controller) records through here, so two processes seeing the same crossing
count it once: the compare-and-set that loses reads again. The log line comes between the two
writes, so a log handler sees a transition that is recorded and has no history row yet, as a
process killed there leaves it (every observer adds a missing row: ``TransitionTable.ensure``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from spark_flow.records.subscriptions import FlowRowTable, Subscription
from spark_flow.records.transitions import TransitionTable, transition_detail
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState, Thresholds

log = logging.getLogger("spark_flow.flow")


class FlowRecorder:
    """Records the transitions of the flow states in ``rows`` (a queue's subscriptions, or the
    home's one row) and their history in ``history``; ``label`` names a row in log lines."""

    def __init__(self, rows: FlowRowTable, history: TransitionTable, label: Callable[[str], str]) -> None:
        self.rows = rows
        self.history = history
        self.label = label

    def step(self, row: Subscription, thresholds: Thresholds, depth: Depth, now_ms: int) -> Subscription | None:
        """Step ``row``'s flow state machine with ``depth`` seen at ``now_ms`` and record the
        transition, if any. Returns the row as it now is; None when another process recorded a
        transition first (the row read is stale: read again)."""
        self.history.ensure(row, depth, thresholds)
        after = row.flow_state.observe(thresholds, depth.count, depth.size, depth.age(now_ms))
        if after == row.flow_state:
            return row
        return self.record(row, after, depth, thresholds)

    def record(self, before: Subscription, after: FlowState, depth: Depth, thresholds: Thresholds,
               at: datetime | None = None) -> Subscription | None:
        """Record the transition of ``before`` to ``after``, seen at ``depth`` at ``at`` (default:
        now; the controller gives its step's time, which its status row says too): the
        compare-and-set, the log line, the history row. Returns the row as it now is; None when
        the row no longer shows ``before``'s state (another process moved it first)."""
        at = at or datetime.now(UTC)
        made = self.rows.transition(before, after.flow_stopped, after.flow_stopped_count,
                                    transition_detail(depth, thresholds, at), at)
        if made is None:
            return None
        log.info("%s flow %s (flowStoppedCount %d): depth %d messages / %d bytes, %s", self.label(before.name),
                 "STOPPED" if after.flow_stopped else "RESUMED", after.flow_stopped_count, depth.count, depth.size,
                 thresholds)
        self.history.record(made)
        return made
