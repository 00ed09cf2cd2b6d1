"""The controller's flow state machine per queue and subscription: a pure step over one
observation, and the function ``applyInPandasWithState`` runs with it.

The step adopts the flow state the subscriptions table shows (gates may have moved it), steps
the machine with the observed depth, follows each consumer's progress (stalled, recovered,
evicted) and emits a status row and events. No I/O: the rule is tested directly, and a
replayed batch decides the same.

``applyInPandasWithState`` converts every group between Arrow and pandas on its own (0.67 ms a
group, whatever its size): with a group per subscription, that was most of a controller batch
at 10,000 queues. So the state is grouped by a hash of the queue's name into
:data:`KEY_GROUPS` groups, each keeping the machines of its subscriptions (:data:`STATE_SCHEMA`,
one JSON text) and when each was last observed. Observations come in as one JSON text each,
and rows go out as one JSON document (bytes) each (:func:`step_input`, :func:`step_rows`): a
binary column is the cheapest to hand back (pandas makes no string array of it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from spark_flow.controller.observation import COMMANDS_KEY
from spark_flow.rules.columns import ddl
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import THRESHOLD_COLUMNS, THRESHOLD_FIELDS, FlowState, Thresholds, producers_held

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.state import GroupState

#: The step's input columns (its group, an observation as JSON) and output column (a row as JSON, UTF-8).
GROUP = "group"
OBSERVATION = "observation"
ROW = "row"
#: The groups of the controller's state (see the module's docstring): a few per state partition,
#: so that a group's conversion costs little beside its rows' steps at any size of home.
KEY_GROUPS = 64
OUTPUT_SCHEMA = f"{ROW} BINARY"
#: The fields of an output row: its kind (status, event, command, gone) and what it says.
ROW_SCHEMA = (
    "kind STRING, event STRING, detail STRING, queue STRING, path STRING, subscription STRING, time BIGINT, "
    "position BIGINT, latest BIGINT, depth_count BIGINT, depth_size BIGINT, oldest_enqueue BIGINT, "
    f"{ddl(THRESHOLD_COLUMNS)}, flow_stopped BOOLEAN, "
    "flow_stopped_count BIGINT, last_transition BIGINT, producers_stopped BOOLEAN, held_since BIGINT, "
    "stalled BOOLEAN, recorded_stopped BOOLEAN, recorded_count BIGINT, discarded_count BIGINT, "
    "expired_count BIGINT, dead_lettered_count BIGINT, drain_rate DOUBLE, admitted_rate DOUBLE, "
    "pacing_producers BIGINT, command_id BIGINT, command STRING, settings STRING"
)
#: A group's state: its machines as a JSON list of ``[queue, subscription, when last observed,
#: *ControllerState]``.
STATE_SCHEMA = "machines STRING"
_NONE = -1  # "no time" in a machine's state


class ControllerState(NamedTuple):
    """What the controller keeps per queue and subscription between micro-batches."""

    flow_stopped: bool = False
    flow_stopped_count: int = 0
    position: int = -1
    progress_at: int = _NONE
    stalled: bool = False
    held_since: int = _NONE


#: Machines by (queue, subscription): each one's state and when it was last observed (ms).
Machines = dict[tuple[str, str], tuple[ControllerState, int]]


class FlowStep:
    """The function ``applyInPandasWithState`` runs per group of queues (:data:`KEY_GROUPS`) and
    micro-batch: :func:`step_machines` over the group's observations. A group not observed for
    ``forget_after`` times out: its queues are gone, and their status rows are removed."""

    def __init__(self, forget_after_ms: int) -> None:
        self.forget_after_ms = forget_after_ms

    def __call__(self, key: tuple[int], frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        now = state.getCurrentProcessingTimeMs()
        machines = _loads(state.get[0]) if state.exists else {}
        if state.hasTimedOut:
            state.remove()
            yield _frame([gone(queue, subscription, now) for queue, subscription in machines])
            return
        observed = (json.loads(text) for frame in frames for text in frame[OBSERVATION].tolist())
        rows = step_machines(machines, observed, now, self.forget_after_ms)
        if machines:
            state.update((_dumps(machines),))
            state.setTimeoutDuration(self.forget_after_ms)
        else:
            state.remove()
        yield _frame(rows)


def step_machines(machines: Machines, observed: Iterable[Mapping[str, Any]], now: int,
                  forget_after_ms: int) -> list[dict[str, Any]]:
    """Step each subscription's machine in ``machines`` (changed in place) with its newest
    observation of ``observed`` at ``now``, and forget those not observed for
    ``forget_after_ms``. Returns their status and event rows, a ``gone`` row for each forgotten
    one, and the command rows among ``observed`` (the commands key), in the order issued."""
    newest: dict[tuple[str, str], Mapping[str, Any]] = {}
    issued = []
    for obs in observed:
        key = (obs["queue"], obs["subscription"])
        if key[1] == COMMANDS_KEY:
            issued.append(obs)
        elif key not in newest or obs["observed_at"] >= newest[key]["observed_at"]:
            newest[key] = obs
    rows: list[dict[str, Any]] = []
    for key, obs in newest.items():
        before = machines.get(key)
        after, stepped = step(before[0] if before else None, obs)
        machines[key] = (after, now)
        rows += stepped
    for key, (_state, seen) in list(machines.items()):
        if now - seen >= forget_after_ms:
            del machines[key]
            rows.append(gone(*key, now))
    return rows + commands(issued)


def _dumps(machines: Machines) -> str:
    return json.dumps([[queue, subscription, seen, *state] for (queue, subscription), (state, seen) in machines.items()])


def _loads(text: str) -> Machines:
    return {(queue, subscription): (ControllerState(*state), seen) for queue, subscription, seen, *state in json.loads(text)}


def gone(queue: str, subscription: str, now: int) -> dict[str, Any]:
    """The row of a queue or subscription not observed for ``forget_after``: its status row goes."""
    return {"kind": "gone", "queue": queue, "subscription": subscription, "time": now}


def commands(observed: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The command rows of a batch, in the order they were issued."""
    return [{**row, "kind": "command", "time": row["observed_at"]}
            for row in sorted(observed, key=lambda row: row["command_id"])]


def as_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of the step's output with every field of :data:`ROW_SCHEMA` (None where it has none)."""
    return {name: row.get(name) for name in _ROW_FIELDS}


def step(before: ControllerState | None, obs: Mapping[str, Any]) -> tuple[ControllerState, list[dict[str, Any]]]:
    """One observation of one subscription: the new state, and the status and event rows.

    Pure: no I/O, so the rule is tested directly and a replayed batch decides the same.
    """
    now = int(obs["observed_at"])
    recorded = FlowState(bool(obs["recorded_stopped"]), int(obs["recorded_count"]))
    thresholds = Thresholds.from_row(obs)
    depth_count, depth_size = int(obs["depth_count"]), int(obs["depth_size"])
    oldest = None if obs.get("oldest_enqueue") is None else int(obs["oldest_enqueue"])
    events: list[tuple[str, str]] = []
    if before is not None:
        events += _recorded_events(FlowState(before.flow_stopped, before.flow_stopped_count), recorded)
    flow = recorded.observe(thresholds, depth_count, depth_size, Depth(depth_count, depth_size, oldest).age(now))
    if flow != recorded:
        events.append(("stopped" if flow.flow_stopped else "resumed", "controller"))

    position = int(obs["position"])
    # A consumer held back by its downstream queues is not late: its clock waits with it.
    moved = before is None or position > before.position or depth_count == 0 or bool(obs.get("backpressured"))
    progress_at = now if before is None or moved or before.progress_at == _NONE else before.progress_at
    timeout_ms = float(obs["stall_timeout"] or 0) * 1000
    # A consumer is not late for messages that were not there: its clock starts at the later of
    # its last progress and the oldest message waiting for it.
    waiting_since = max(progress_at, int(obs["oldest_enqueue"] or 0))
    stalled = bool(timeout_ms and depth_count > 0 and now - waiting_since >= timeout_ms)
    was_stalled = before is not None and before.stalled
    if stalled and not was_stalled:
        events.append(("stalled", f"no ack for {(now - waiting_since) / 1000:.1f}s with {depth_count} messages"))
    elif was_stalled and not stalled:
        events.append(("recovered", "held back by a downstream queue" if obs.get("backpressured")
                       else "acks again" if moved else "stallTimeout changed"))
    evict = stalled and obs["stalled_policy"] == "skip"
    if evict:
        events.append(("evicted", f"skipped {depth_count} messages to position {obs['latest']}"))

    held = producers_held(flow_stopped=(flow.flow_stopped,), producers_stopped=bool(obs["producers_stopped"]))
    held_since = (before.held_since if before is not None and before.held_since != _NONE else now) if held else _NONE
    last_transition = now if flow != recorded else obs.get("recorded_transition")
    after = ControllerState(flow.flow_stopped, flow.flow_stopped_count, position, progress_at, stalled and not evict,
                            held_since)
    status = {
        **{k: obs.get(k) for k in ("queue", "path", "subscription", "position", "latest", "depth_count",
                                    "depth_size", "oldest_enqueue", "producers_stopped", "recorded_stopped",
                                    "recorded_count", "discarded_count", "expired_count", "dead_lettered_count",
                                    "drain_rate", "admitted_rate", "pacing_producers")},
        **{name: getattr(thresholds, name) for name in THRESHOLD_FIELDS}, "kind": "status", "time": now,
        "flow_stopped": flow.flow_stopped, "flow_stopped_count": flow.flow_stopped_count, "last_transition": last_transition,
        "held_since": None if held_since == _NONE else held_since, "stalled": stalled,
        "event": "evict" if evict else None,
    }
    event_rows = [{**status, "kind": "event", "event": event, "detail": detail} for event, detail in events]
    return after, [status, *event_rows]


def _recorded_events(known: FlowState, recorded: FlowState) -> list[tuple[str, str]]:
    """Transitions gates recorded since the controller's last look."""
    if recorded == known:
        return []
    events = []
    if recorded.flow_stopped_count > known.flow_stopped_count:
        if known.flow_stopped:
            events.append(("resumed", "recorded by a gate"))
        events.append(("stopped", "recorded by a gate"))
        if not recorded.flow_stopped:
            events.append(("resumed", "recorded by a gate"))
    elif recorded.flow_stopped != known.flow_stopped:
        events.append(("stopped" if recorded.flow_stopped else "resumed", "recorded by a gate"))
    return events


_ROW_FIELDS = [part.strip().split(" ")[0] for part in ROW_SCHEMA.split(",")]


def step_input(observations: DataFrame) -> DataFrame:
    """The observations as the step takes them: the group of their queue and the whole
    observation as one JSON text (nulls kept, so every field is there)."""
    from pyspark.sql import functions as F

    return observations.select(F.pmod(F.hash("queue"), F.lit(KEY_GROUPS)).alias(GROUP),
                               F.to_json(F.struct("*"), {"ignoreNullFields": "false"}).alias(OBSERVATION))


def step_rows(output: pa.Table) -> list[dict[str, Any]]:
    """The step's output rows (a micro-batch of it, as Arrow) as dicts with every field of
    :data:`ROW_SCHEMA`."""
    return [json.loads(text) for text in output.column(ROW).to_pylist()]


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as the step's output: built from an object array under a column index made once,
    which costs a quarter of what a frame built from a dict does."""
    import numpy as np
    import pandas as pd

    values = np.empty((len(rows), 1), dtype=object)
    values[:, 0] = [json.dumps(as_row(row)).encode() for row in rows]
    return pd.DataFrame(values, columns=_columns(), copy=False)


@functools.cache
def _columns() -> pd.Index:
    """The output's column index (made at the first frame: pandas is imported where it is used)."""
    import pandas as pd

    return pd.Index([ROW], dtype=object)
