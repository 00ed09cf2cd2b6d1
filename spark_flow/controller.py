"""The flow controller: a streaming query that watches every queue of a home, runs the flow
state machine per queue and subscription, applies operator commands, and writes the status and
history tables.

    flowcontrol source (observations + commands)
      -> groupBy(queue, subscription).applyInPandasWithState(step)   # checkpointed state
      -> foreachBatch(ControllerSink)                                # commands, transitions, tables

The subscriptions table stays the one record of ``flowStopped`` / ``flowStoppedCount`` that
gates follow: the controller reads it in every observation, adopts what gates recorded, and
records its own transitions there with the same compare-and-set. So a restarted controller,
whose checkpointed state may be one batch behind, never counts a stop twice. Gates still turn
ON by themselves the moment they see ``depth > stop``, so the capacity bound holds when the
controller lags or is down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit

from spark_flow.config import (
    check_conf,
    conf_settings,
    parse_count,
    parse_duration,
    pattern_matches,
    queue_settings,
    session_flow_conf,
    split_options,
)
from spark_flow.exceptions import ConfigurationError, SubscriptionNotFoundError
from spark_flow.home import HOME_CONF, Registry, control_path
from spark_flow.queue import normalize_path, open_queue, queue_location
from spark_flow.state import FlowState, Thresholds
from spark_flow.status import CommandLog, append_history, command_settings, with_settings, write_status
from spark_flow.subscriptions import Subscription

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.state import GroupState

log = logging.getLogger("spark_flow.controller")

#: The key of command rows: no subscription has an empty name.
COMMANDS_KEY = ""

OBSERVATION_SCHEMA = (
    "kind STRING, queue STRING, path STRING, subscription STRING, observed_at BIGINT, position BIGINT, "
    "latest BIGINT, depth_count BIGINT, depth_size BIGINT, oldest_enqueue BIGINT, stop_count BIGINT, "
    "resume_count BIGINT, stop_size BIGINT, resume_size BIGINT, producers_stopped BOOLEAN, "
    "stall_timeout DOUBLE, stalled_policy STRING, recorded_stopped BOOLEAN, recorded_count BIGINT, "
    "recorded_transition BIGINT, backpressured BOOLEAN, command_id BIGINT, command STRING, settings STRING"
)
OUTPUT_SCHEMA = (
    "kind STRING, event STRING, detail STRING, queue STRING, path STRING, subscription STRING, time BIGINT, "
    "position BIGINT, latest BIGINT, depth_count BIGINT, depth_size BIGINT, oldest_enqueue BIGINT, "
    "stop_count BIGINT, resume_count BIGINT, stop_size BIGINT, resume_size BIGINT, flow_stopped BOOLEAN, "
    "flow_stopped_count BIGINT, last_transition BIGINT, producers_stopped BOOLEAN, held_since BIGINT, "
    "stalled BOOLEAN, recorded_stopped BOOLEAN, recorded_count BIGINT, command_id BIGINT, command STRING, "
    "settings STRING"
)
STATE_SCHEMA = (
    "flow_stopped BOOLEAN, flow_stopped_count BIGINT, position BIGINT, progress_at BIGINT, stalled BOOLEAN, "
    "held_since BIGINT"
)
_NONE = -1  # "no time" in the state, whose fields are not nullable across Spark versions


# -- the observation source ------------------------------------------------------------------


@dataclass(frozen=True)
class ObservePartition(InputPartition):
    """Queues to look at in one read task; the first task also carries the commands to apply."""

    queues: tuple[tuple[str, str], ...]
    commands_after: int = -1
    commands_upto: int = -1
    home: str = ""


class FlowControlDataSource(DataSource):
    """``spark.readStream.format("flowcontrol").option("home", home)``: one observation per queue
    and subscription of the home's registry each micro-batch, plus the operator commands issued
    since the last one. Options: ``home``, ``maxPartitions`` (read tasks, default 2). Each queue
    is judged with its recorded settings, as its gates judge it."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        own, _producer, _conf = split_options(options, ("home", "maxPartitions"))
        if not own.get("home"):
            raise ConfigurationError("home", own.get("home"), "the control plane's location (spark.flow.home)")
        self.home = normalize_path(own["home"])
        self.max_partitions = parse_count("maxPartitions", own.get("maxPartitions", 2), minimum=1)

    @classmethod
    def name(cls) -> str:
        return "flowcontrol"

    def schema(self) -> str:
        return OBSERVATION_SCHEMA

    def streamReader(self, schema: Any) -> ObservationReader:
        return ObservationReader(self.home, self.max_partitions)


class ObservationReader(DataSourceStreamReader):
    """Offsets ``{"tick": n, "commands": id}``: every trigger is a new look, and the commands up
    to ``id`` belong to that batch, so a replayed batch applies the same commands."""

    def __init__(self, home: str, max_partitions: int) -> None:
        self.home = home
        self.max_partitions = max_partitions

    def initialOffset(self) -> dict:
        return {"tick": 0, "commands": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return {"tick": start["tick"] + 1, "commands": max(CommandLog(self.home).latest(), start["commands"])}

    def partitions(self, start: dict, end: dict) -> list[ObservePartition]:
        queues = tuple(Registry(self.home).queues().items())
        parts = max(1, min(self.max_partitions, len(queues)))
        return [ObservePartition(queues[i::parts], start["commands"] if i == 0 else -1,
                                 end["commands"] if i == 0 else -1, self.home) for i in range(parts)]

    def read(self, partition: ObservePartition) -> Iterator[tuple]:
        for name, path in partition.queues:
            try:
                yield from _observe(name, path)
            except Exception as error:  # a queue dropped or unreadable: its keys time out
                log.warning("cannot observe queue %r at %s: %s", name, path, error)
        if partition.commands_upto > partition.commands_after:
            names = dict(Registry(partition.home).queues())
            for command in CommandLog(partition.home).read(partition.commands_after, partition.commands_upto):
                targets = [n for n in names if n == command.target or pattern_matches(command.target, n)]
                for queue in targets or [command.target]:
                    yield _row(kind="command", queue=queue, path=names.get(queue), subscription=COMMANDS_KEY,
                               observed_at=_now_ms(), command_id=command.id, command=command.command,
                               settings=json.dumps(dict(command.settings)))

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: observations are looked at again, commands are kept."""


_OBSERVATION_FIELDS = [part.strip().split(" ")[0] for part in OBSERVATION_SCHEMA.split(",")]


def _row(**values: Any) -> tuple:
    return tuple(values.get(name) for name in _OBSERVATION_FIELDS)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _observe(name: str, path: str) -> Iterator[tuple]:
    """One observation per subscription of a queue: depth, the queue's recorded settings, the
    recorded flow state."""
    queue = open_queue(path)
    latest = queue.refresh()
    settings = queue.settings()
    thresholds = settings.thresholds
    subs = queue.subscriptions.list()
    for sub in subs:
        commits = queue.ledger.commits(sub.position, latest)
        oldest = next((c.timestamp for c in commits if c.count), None)
        transition = sub.last_transition
        yield _row(backpressured=any(_stopped(d) for d in sub.downstream),
            kind="observe", queue=name, path=queue.path, subscription=sub.name, observed_at=_now_ms(),
            position=sub.position, latest=latest, depth_count=sum(c.count for c in commits),
            depth_size=sum(c.size for c in commits), oldest_enqueue=oldest,
            stop_count=thresholds.stop_count, resume_count=thresholds.resume_count,
            stop_size=thresholds.stop_size, resume_size=thresholds.resume_size,
            producers_stopped=settings.producers_stopped, stall_timeout=settings.stall_timeout,
            stalled_policy=settings.stalled_consumer_policy, recorded_stopped=sub.flow_stopped,
            recorded_count=sub.flow_stopped_count,
            recorded_transition=int(transition.timestamp() * 1000) if transition else None,
        )
    if subs:
        queue.ledger.forget(min(s.position for s in subs))


def _stopped(path: str) -> bool:
    """Whether the queue at ``path`` holds its producers (flow-stopped, or stopped by an operator)."""
    try:
        queue = open_queue(path)
        queue.refresh()
        return queue.settings().producers_stopped or any(s.flow_stopped for s in queue.subscriptions.list())
    except Exception as error:  # dropped or unreadable: it holds nobody
        log.warning("cannot look at downstream queue %s: %s", path, error)
        return False


# -- the state machine per queue and subscription ---------------------------------------------


@dataclass(frozen=True)
class ControllerState:
    """What the controller keeps per queue and subscription between micro-batches."""

    flow_stopped: bool = False
    flow_stopped_count: int = 0
    position: int = -1
    progress_at: int = _NONE
    stalled: bool = False
    held_since: int = _NONE


class FlowStep:
    """The function ``applyInPandasWithState`` runs per (queue, subscription) and micro-batch.

    It adopts the flow state the subscriptions table shows (gates may have moved it), steps the
    machine with the observed depth, and emits a status row, events (transitions, stalls) and,
    for the commands key, the batch's commands in order. A key not observed for ``forget_after``
    times out: its subscription or queue is gone, and its status row is removed.
    """

    def __init__(self, forget_after_ms: int) -> None:
        self.forget_after_ms = forget_after_ms

    def __call__(self, key: tuple, frames: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        import pandas as pd

        queue, subscription = key
        if state.hasTimedOut:
            state.remove()
            yield _frame([{"kind": "gone", "queue": queue, "subscription": subscription,
                           "time": state.getCurrentProcessingTimeMs()}])
            return
        observed = pd.concat(list(frames), ignore_index=True)
        if subscription == COMMANDS_KEY:
            commands = observed.sort_values("command_id")
            yield _frame([{**row, "kind": "command", "time": row["observed_at"]} for row in _records(commands)])
            return
        obs = _records(observed.sort_values("observed_at"))[-1]
        before = ControllerState(*state.get) if state.exists else None
        after, rows = step(before, obs)
        state.update(astuple(after))
        state.setTimeoutDuration(self.forget_after_ms)
        yield _frame(rows)


def step(before: ControllerState | None, obs: Mapping[str, Any]) -> tuple[ControllerState, list[dict[str, Any]]]:
    """One observation of one subscription: the new state, and the status and event rows.

    Pure: no I/O, so the rule is tested directly and a replayed batch decides the same.
    """
    now = int(obs["observed_at"])
    recorded = FlowState(bool(obs["recorded_stopped"]), int(obs["recorded_count"]))
    thresholds = Thresholds(int(obs["stop_count"]), int(obs["resume_count"]), int(obs["stop_size"]),
                            int(obs["resume_size"]))
    depth_count, depth_size = int(obs["depth_count"]), int(obs["depth_size"])
    events: list[tuple[str, str]] = []
    if before is not None:
        events += _recorded_events(FlowState(before.flow_stopped, before.flow_stopped_count), recorded)
    flow = recorded.observe(thresholds, depth_count, depth_size)
    if flow != recorded:
        events.append(("stopped" if flow.flow_stopped else "resumed", "controller"))

    position = int(obs["position"])
    # A consumer held back by its downstream queues is not late: its clock waits with it.
    moved = before is None or position > before.position or depth_count == 0 or bool(obs.get("backpressured"))
    progress_at = now if moved or before.progress_at == _NONE else before.progress_at
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

    held = flow.flow_stopped or bool(obs["producers_stopped"])
    held_since = (before.held_since if before is not None and before.held_since != _NONE else now) if held else _NONE
    last_transition = now if flow != recorded else obs.get("recorded_transition")
    after = ControllerState(flow.flow_stopped, flow.flow_stopped_count, position, progress_at, stalled and not evict,
                            held_since)
    status = {
        **{k: obs.get(k) for k in ("queue", "path", "subscription", "position", "latest", "depth_count",
                                    "depth_size", "oldest_enqueue", "stop_count", "resume_count", "stop_size",
                                    "resume_size", "producers_stopped", "recorded_stopped", "recorded_count")},
        "kind": "status", "time": now, "flow_stopped": flow.flow_stopped,
        "flow_stopped_count": flow.flow_stopped_count, "last_transition": last_transition,
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


_OUTPUT_FIELDS = [part.strip().split(" ")[0] for part in OUTPUT_SCHEMA.split(",")]


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([{name: row.get(name) for name in _OUTPUT_FIELDS} for row in rows], columns=_OUTPUT_FIELDS)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts of plain Python values, pandas' missing values as None."""
    return [{k: (None if _missing(v) else v) for k, v in row.items()} for row in frame.to_dict("records")]


def _missing(value: Any) -> bool:
    import pandas as pd

    return value is None or (not isinstance(value, (str, bytes, list, dict)) and bool(pd.isna(value)))


# -- the sink: commands, transitions, status and history --------------------------------------


class ControllerSink:
    """foreachBatch of the controller. Every write is safe to repeat: commands apply by id
    (an older id never overwrites a newer one), transitions are compare-and-set, status rows
    are upserts, and history is appended once per batch id (a Delta app transaction)."""

    def __init__(self, home: str) -> None:
        self.home = home

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.toArrow().to_pylist()
        query_id = batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        history = []
        for row in sorted((r for r in rows if r["kind"] == "command"), key=lambda r: r["command_id"]):
            history.append(self._apply(row))
        statuses = [r for r in rows if r["kind"] == "status"]
        for row in statuses:
            self._transition(row)
            if row["event"] == "evict":
                open_queue(row["path"]).subscriptions.acknowledge(row["subscription"], row["latest"],
                                                                  discarded=row["depth_count"])
        events = [r for r in rows if r["kind"] == "event"]
        for row in events:
            log.info("queue %r subscription %r %s (%s): depth %d, flowStoppedCount %d", row["queue"],
                     row["subscription"], row["event"].upper(), row["detail"], row["depth_count"],
                     row["flow_stopped_count"])
        write_status(self.home, [_status_row(r) for r in statuses],
                     [(r["queue"], r["subscription"]) for r in rows if r["kind"] == "gone"])
        history += [_history_row(r, "sample") for r in statuses] + [_history_row(r, r["event"]) for r in events]
        append_history(self.home, history, f"spark-flow-controller/{query_id}", batch_id)

    def _apply(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one command to one queue; an error is recorded, not raised (it was checked when
        issued). The queue's settings as they will be are checked whole before anything is
        written, so a command is applied whole or not at all."""
        issued = json.loads(row["settings"] or "{}")
        detail = f"command {row['command_id']}: {row['command']} {json.dumps(issued) if issued else ''}".strip()
        settings = command_settings(row["command"], issued)
        try:
            if row["path"] is None:
                raise LookupError(f"no registered queue matches {row['queue']!r}")
            queue = open_queue(row["path"])
            if row["command_id"] > queue.overrides.applied():  # a replayed batch's commands are in already
                queue_settings(queue.name, queue.properties(), with_settings(queue.overrides.settings(), settings))
                queue.overrides.apply(settings, row["command_id"])
            log.info("queue %r: applied %s", row["queue"], detail)
            event = "command"
        except Exception as error:
            log.error("queue %r: %s failed: %s", row["queue"], detail, error)
            event, detail = "command-failed", f"{detail}: {error}"
        return _history_row({**row, "time": row["time"] or _now_ms()}, event, detail)

    @staticmethod
    def _transition(row: Mapping[str, Any]) -> None:
        """Record the controller's transition in the subscriptions table, if nobody did yet, and
        make sure the queue's history has the row of the state it adopted and of its own."""
        from spark_flow.ledger import Depth

        queue = open_queue(row["path"])
        depth = Depth(row["depth_count"], row["depth_size"])
        thresholds = Thresholds(row["stop_count"], row["resume_count"], row["stop_size"], row["resume_size"])
        before = Subscription(row["subscription"], row["position"], row["recorded_stopped"], row["recorded_count"])
        if (row["flow_stopped"], row["flow_stopped_count"]) == (before.flow_stopped, before.flow_stopped_count):
            changed = False
        else:
            changed = queue.subscriptions.transition(before, row["flow_stopped"], row["flow_stopped_count"])
        state = (row["flow_stopped"], row["flow_stopped_count"]) if changed else (before.flow_stopped,
                                                                                   before.flow_stopped_count)
        if queue.history.unconfirmed(before.name, *state):
            # read the row as it is now, with its creation time (its history counts from there)
            with contextlib.suppress(SubscriptionNotFoundError):
                queue.history.ensure(queue.subscriptions.get(before.name), depth, thresholds)


def _ts(ms: int | None) -> Any:
    from datetime import UTC, datetime

    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _status_row(row: Mapping[str, Any]) -> dict[str, Any]:
    oldest = row["oldest_enqueue"]
    return {
        **{k: row[k] for k in ("queue", "subscription", "depth_count", "depth_size", "stop_count", "resume_count",
                               "stop_size", "resume_size", "flow_stopped", "flow_stopped_count",
                               "producers_stopped", "position", "latest")},
        "last_transition": _ts(row["last_transition"]),
        "oldest_message_age_seconds": None if oldest is None else max(0.0, (row["time"] - oldest) / 1000),
        "consumer_stalled": row["stalled"],
        "producers_held": bool(row["flow_stopped"] or row["producers_stopped"]),
        "held_since": _ts(row["held_since"]), "updated_at": _ts(row["time"]),
    }


def _history_row(row: Mapping[str, Any], event: str, detail: str | None = None) -> dict[str, Any]:
    return {
        **{k: row.get(k) for k in ("queue", "depth_count", "depth_size", "stop_count", "resume_count", "stop_size",
                                   "resume_size", "flow_stopped", "flow_stopped_count", "producers_stopped")},
        "time": _ts(row["time"]), "subscription": row.get("subscription") or "", "event": event,
        "detail": detail if detail is not None else row.get("detail"),
    }


# -- starting it ------------------------------------------------------------------------------


def start_controller(
    spark: SparkSession,
    home: str | None = None,
    *,
    queues: tuple[str, ...] | list[str] = (),
    checkpoint_location: str | None = None,
    trigger: str = "1 second",
    forget_after: str = "60s",
    query_name: str = "spark_flow_controller",
) -> StreamingQuery:
    """Start the flow controller in this SparkSession (embedded mode, or the controller job's).

    Parameters
    ----------
    spark : SparkSession
    home : str, optional
        The control plane's location; default ``spark.flow.home``.
    queues : sequence of str, optional
        Queues (paths or catalog names) to register before starting; queues declared with
        ``spark.flow.home`` set are registered already.
    checkpoint_location : str, optional
        Default ``<home>/_spark_flow/checkpoints/controller``: a restart goes on from there.
    trigger : str
        How often the controller looks at every queue.
    forget_after : str
        A queue or subscription not seen for this long is removed from the status table.
    """
    from pyspark.sql.streaming.state import GroupStateTimeout

    home = home or spark.conf.get(HOME_CONF, None)
    if not home:
        raise ConfigurationError(HOME_CONF, home, "the control plane's location (a directory or object store path)")
    home = normalize_path(home)
    forget_ms = int(parse_duration("forget_after", forget_after, minimum=0.001) * 1000)
    conf = session_flow_conf(spark)
    check_conf(conf)
    ignored = sorted(key for key, _raw in conf_settings("", conf, "queue").values())
    if ignored:
        log.warning("the controller judges every queue with the settings recorded with it; its own Spark conf's "
                    "queue settings are not used: %s (spark-flow set changes a queue's)", ", ".join(ignored))
    registry = Registry(home)
    for queue in queues:
        handle = open_queue(queue_location(spark, queue))
        registry.register(handle.name, handle.path)
    spark.dataSource.register(FlowControlDataSource)
    observations = spark.readStream.format("flowcontrol").option("home", home).load()
    steps = observations.groupBy("queue", "subscription").applyInPandasWithState(
        FlowStep(forget_ms), OUTPUT_SCHEMA, STATE_SCHEMA, "Update", GroupStateTimeout.ProcessingTimeTimeout)
    checkpoint = checkpoint_location or control_path(home, "checkpoints/controller")
    return (steps.writeStream.outputMode("update").foreachBatch(ControllerSink(home)).queryName(query_name)
            .option("checkpointLocation", checkpoint).trigger(processingTime=trigger).start())


def stop_between_batches(query: StreamingQuery, timeout: float = 30.0) -> None:
    """Stop ``query`` while none of its micro-batches runs. A stop in mid-batch interrupts the
    state store's tasks, which Spark logs as errors (harmless: the batch is redone at restart)."""
    deadline = time.monotonic() + timeout
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
