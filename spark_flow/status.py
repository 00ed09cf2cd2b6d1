"""The status, history and command tables under ``spark.flow.home``, and :class:`FlowAdmin`,
the operator's API over them (the ``spark-flow`` CLI and notebooks use it).

The status table is the Qpid QMF queue object as a Delta table: one row per queue and
subscription, upserted by the controller every micro-batch. The history table keeps a sample
per queue and subscription per controller micro-batch plus every transition and command, for
plots. Commands are appended by operators and applied by the controller in commit order: the
commit version is the command's id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_flow.config import KEYS, pattern_matches, queue_settings, setting_name
from spark_flow.exceptions import ConfigurationError, QueueNotFoundError
from spark_flow.home import Registry, control_path
from spark_flow.plot import Sample
from spark_flow.queue import Queue, normalize_path, open_queue
from spark_flow.subscriptions import DEFAULT_SUBSCRIPTION, Subscription

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from deltalake import DeltaTable

#: Settings an operator cannot ``set``: they have their own command, or are not a queue's.
NOT_SETTABLE = frozenset({"producersStopped", "home"})


def status_schema() -> pa.Schema:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([
        pa.field("queue", pa.string(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("depth_count", pa.int64()),
        pa.field("depth_size", pa.int64()),
        pa.field("stop_count", pa.int64()),
        pa.field("resume_count", pa.int64()),
        pa.field("stop_size", pa.int64()),
        pa.field("resume_size", pa.int64()),
        pa.field("flow_stopped", pa.bool_()),
        pa.field("flow_stopped_count", pa.int64()),
        pa.field("last_transition", ts),
        pa.field("oldest_message_age_seconds", pa.float64()),
        pa.field("consumer_stalled", pa.bool_()),
        pa.field("producers_stopped", pa.bool_()),
        pa.field("producers_held", pa.bool_()),
        pa.field("held_since", ts),
        pa.field("position", pa.int64()),
        pa.field("latest", pa.int64()),
        pa.field("updated_at", ts),
    ])


def history_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("queue", pa.string(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("depth_count", pa.int64()),
        pa.field("depth_size", pa.int64()),
        pa.field("stop_count", pa.int64()),
        pa.field("resume_count", pa.int64()),
        pa.field("stop_size", pa.int64()),
        pa.field("resume_size", pa.int64()),
        pa.field("flow_stopped", pa.bool_()),
        pa.field("flow_stopped_count", pa.int64()),
        pa.field("producers_stopped", pa.bool_()),
        pa.field("detail", pa.string()),
    ])


def _commands_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("command", pa.string(), nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("settings", pa.string(), nullable=False),
        pa.field("issued_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("token", pa.string(), nullable=False),
    ])


@dataclass(frozen=True)
class Command:
    """One operator command: ``id`` is the commands table's commit version (the order applied)."""

    id: int
    command: str
    target: str
    settings: Mapping[str, str | None]
    issued_at: datetime


def command_settings(command: str, settings: Mapping[str, str | None]) -> dict[str, str | None]:
    """The run-time settings a command writes for a queue: ``stop-producers`` and
    ``start-producers`` set ``producersStopped``; ``set`` its values, ``unset`` None (removed)."""
    if command in ("stop-producers", "start-producers"):
        return {"producersStopped": "true" if command == "stop-producers" else "false"}
    return dict(settings)


def with_settings(runtime: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """Run-time settings after ``changes`` (None removes a setting)."""
    merged = dict(runtime)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


ALL_QUEUES = ">"


class CommandLog:
    """The commands table: appended by operators, read in order by the controller."""

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.location = control_path(home, "commands")
        self._storage_options = dict(storage_options or {}) or None

    def append(self, command: str, target: str, settings: Mapping[str, str] | None = None) -> int:
        """Append one command as its own commit; return its id (that commit's version)."""
        import pyarrow as pa
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        token = uuid.uuid4().hex
        row = {"command": command, "target": target, "settings": json.dumps(dict(settings or {})),
               "issued_at": datetime.now(UTC), "token": token}
        write_deltalake(self.location, pa.Table.from_pylist([row], schema=_commands_schema()), mode="append",
                        configuration={"delta.enableChangeDataFeed": "true"},
                        commit_properties=CommitProperties(custom_metadata={"spark.flow.command": token}),
                        storage_options=self._storage_options)
        for info in DeltaTable(self.location, storage_options=self._storage_options).history(50):
            if info.get("spark.flow.command") == token:
                return int(info["version"])
        raise RuntimeError(f"command {token} was written but not found in the last 50 commits of {self.location}")

    def latest(self) -> int:
        """The id of the newest command, -1 if there is none."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.location, storage_options=self._storage_options):
            return -1
        return DeltaTable(self.location, storage_options=self._storage_options).version()

    def read(self, after: int = -1, upto: int | None = None) -> list[Command]:
        """The commands with ``after < id <= upto``, in order."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from deltalake import DeltaTable

        upto = self.latest() if upto is None else upto
        if upto <= after:
            return []
        table = DeltaTable(self.location, storage_options=self._storage_options)
        changes = pa.table(table.load_cdf(starting_version=after + 1, ending_version=upto))
        changes = changes.select(["command", "target", "settings", "issued_at", "_change_type", "_commit_version"])
        changes = changes.cast(pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f
                                          for f in changes.schema]))
        changes = changes.filter(pc.equal(changes["_change_type"], "insert"))
        rows = sorted(changes.to_pylist(), key=lambda r: r["_commit_version"])
        return [Command(int(r["_commit_version"]), r["command"], r["target"], json.loads(r["settings"]),
                        r["issued_at"]) for r in rows]


class FlowAdmin:
    """The operator's view of a home: queues, status, history, and commands to the controller.

    Parameters
    ----------
    home : str
        The control plane's location (``spark.flow.home``).
    storage_options : mapping, optional
        deltalake storage options (object store credentials).

    Examples
    --------
    >>> admin = FlowAdmin("/data/flow")
    >>> admin.status()                            # a pandas DataFrame, one row per queue/subscription
    >>> admin.stop_producers("events")            # hold every producer of queue events
    >>> admin.set("events", stopCount=900, resumeCount=500)
    >>> admin.plot("events", "/tmp/events.png")
    """

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.home = normalize_path(home)
        self.storage_options = dict(storage_options or {})
        self.registry = Registry(self.home, self.storage_options)
        self.commands = CommandLog(self.home, self.storage_options)

    def queues(self) -> dict[str, str]:
        """The registered queues: name -> table location."""
        return self.registry.queues()

    def register(self, path: str) -> Queue:
        """Register the queue declared at ``path`` (queues declared with ``spark.flow.home`` set
        are registered already)."""
        queue = Queue(path, self.storage_options)
        self.registry.register(queue.name, queue.path)
        return queue

    def queue(self, name: str) -> Queue:
        """The handle of registered queue ``name``."""
        queues = self.queues()
        if name not in queues:
            raise QueueNotFoundError(name, f"not registered in {self.home}: allowed is one of "
                                           f"{', '.join(map(repr, queues)) or 'none (declare one)'}")
        return open_queue(queues[name], self.storage_options)

    def matching(self, target: str) -> list[str]:
        """The registered queues a target names: a queue name or an ActiveMQ-style pattern
        (``*`` one segment, a trailing ``>`` the rest; ``>`` alone is every queue)."""
        queues = self.queues()
        names = [name for name in queues if name == target or pattern_matches(target, name)]
        if not names:
            raise QueueNotFoundError(target, "no registered queue matches: allowed is a queue name or pattern "
                                             f"matching one of {', '.join(map(repr, queues)) or 'none'}")
        return names

    def subscriptions(self, queue: str) -> list[Subscription]:
        """The subscriptions of ``queue``: positions and flow state."""
        return self.queue(queue).subscriptions.list()

    def stop_producers(self, target: str = ALL_QUEUES) -> int:
        """Hold every producer of the queues ``target`` names, whatever their depth; returns the
        command id. The controller applies it; gates obey it from their next look."""
        self.matching(target)
        return self.commands.append("stop-producers", target)

    def start_producers(self, target: str = ALL_QUEUES) -> int:
        """Undo :meth:`stop_producers`; the queues' thresholds decide again."""
        self.matching(target)
        return self.commands.append("start-producers", target)

    def set(self, target: str, settings: Mapping[str, Any] | None = None, **more: Any) -> int:
        """Change settings (``stopCount=900``, ``resumeSize="8m"``, ``policy="ring"``) of the
        queues ``target`` names at run time; returns the command id. Each queue's settings as
        they will be, with the commands issued before this one, are checked whole before the
        command is written: a change that would make a queue invalid is refused here."""
        wanted = {**dict(settings or {}), **more}
        if not wanted:
            raise ConfigurationError("settings", wanted, "at least one setting, e.g. stopCount=900")
        return self._change("set", target, {_settable(key, value): str(value) for key, value in wanted.items()})

    def unset(self, target: str, *keys: str) -> int:
        """Remove run-time settings of the queues ``target`` names: each goes back to the value
        recorded with the queue (its table property) or the default; returns the command id."""
        if not keys:
            raise ConfigurationError("keys", keys, "at least one setting to remove, e.g. stopCount")
        return self._change("unset", target, {_settable(key, None): None for key in keys})

    def _change(self, command: str, target: str, changes: Mapping[str, str | None]) -> int:
        for name in self.matching(target):
            queue = self.queue(name)
            runtime = with_settings(self._pending(queue), changes)
            queue_settings(name, queue.properties(), runtime)
        return self.commands.append(command, target, changes)

    def _pending(self, queue: Queue) -> dict[str, str]:
        """A queue's run-time settings once the commands issued and not yet applied are."""
        runtime = queue.overrides.settings()
        for command in self.commands.read(queue.overrides.applied()):
            if command.target == queue.name or pattern_matches(command.target, queue.name):
                runtime = with_settings(runtime, command_settings(command.command, command.settings))
        return runtime

    def status(self, target: str | None = None) -> pd.DataFrame:
        """The status table (as the controller last wrote it), optionally for the queues ``target`` names."""
        import pandas as pd

        rows = _read(control_path(self.home, "status"), self.storage_options)
        frame = pd.DataFrame(rows, columns=status_schema().names)
        if target is not None:
            names = self.matching(target)
            frame = frame[frame["queue"].isin(names)]
        return frame.sort_values(["queue", "subscription"]).reset_index(drop=True)

    def history(self, queue: str, subscription: str = DEFAULT_SUBSCRIPTION) -> list[dict[str, Any]]:
        """The controller's samples and events for one subscription, oldest first."""
        self.queue(queue)
        rows = _read(control_path(self.home, "history"), self.storage_options)
        mine = [r for r in rows if r["queue"] == queue and r["subscription"] in (subscription, "")]
        return sorted(mine, key=lambda r: r["time"])

    def plot(self, queue: str, path: str | Path, subscription: str = DEFAULT_SUBSCRIPTION) -> Path:
        """A PNG of the subscription's depth against its thresholds over time, stopped intervals shaded."""
        from spark_flow.plot import plot_depth

        samples = [r for r in self.history(queue, subscription) if r["event"] == "sample"]
        if not samples:
            raise QueueNotFoundError(queue, f"the history in {self.home} has no samples of subscription "
                                            f"{subscription!r} yet: is the controller running?")
        transitions = [r for r in self.queue(queue).history.read() if r["subscription"] == subscription]
        return plot_depth(depth_points(samples, transitions), None, path,
                          title=f"queue {queue!r}, subscription {subscription!r}")


def depth_points(samples: Sequence[Mapping[str, Any]], transitions: Sequence[Mapping[str, Any]]) -> list[Sample]:
    """The controller's samples merged with the queue's transition records, in time order, from
    the first sample on: a transition record carries the depth at the very moment of a stop or
    resume, which periodic samples may miss. Producers count as held while flow-stopped or
    stopped by an operator (as the last sample before says)."""
    start = samples[0]["time"]
    points, manual = [], False
    rows = [*samples, *(r for r in transitions if r["time"] >= start)]
    for row in sorted(rows, key=lambda r: r["time"]):
        manual = bool(row.get("producers_stopped", manual))
        points.append(Sample((row["time"] - start).total_seconds(), row["depth_count"],
                             bool(row["flow_stopped"]) or manual, row["stop_count"], row["resume_count"]))
    return points


def _settable(key: str, value: Any) -> str:
    """The queue setting a ``set`` or ``unset`` key names (``stopCount``, ``flow.stopCount``,
    ``qpid.flow_stop_count``); producer settings and operator states are refused."""
    name = setting_name(key, value)
    if KEYS[name].scope != "queue" or name in NOT_SETTABLE:
        allowed = [k for k in KEYS if KEYS[k].scope == "queue" and k not in NOT_SETTABLE]
        raise ConfigurationError(key, value, "a queue setting: " + ", ".join(allowed),
                                 "producersStopped has its own commands, stop-producers and start-producers"
                                 if name == "producersStopped" else
                                 f"{name} is a producer's setting: give it to the producer (QueueSink options or "
                                 "its Spark conf)")
    return name


def _read(location: str, storage_options: Mapping[str, str]) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    options = dict(storage_options) or None
    if not DeltaTable.is_deltatable(location, storage_options=options):
        return []
    return DeltaTable(location, storage_options=options).to_pyarrow_table().to_pylist()


def write_status(home: str, rows: Sequence[Mapping[str, Any]], gone: Sequence[tuple[str, str]],
                 storage_options: Mapping[str, str] | None = None) -> None:
    """Upsert status rows by (queue, subscription) and delete the rows of subscriptions that are gone."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from spark_flow.subscriptions import retry_commit

    location, options = control_path(home, "status"), dict(storage_options or {}) or None
    data = pa.Table.from_pylist(list(rows), schema=status_schema())
    if not DeltaTable.is_deltatable(location, storage_options=options):
        write_deltalake(location, data, mode="append", storage_options=options)
    elif rows:
        retry_commit(lambda: DeltaTable(location, storage_options=options)
                     .merge(data, predicate="t.queue = s.queue AND t.subscription = s.subscription",
                            source_alias="s", target_alias="t")
                     .when_matched_update_all().when_not_matched_insert_all().execute())
    for queue, subscription in gone:
        predicate = f"queue = {_sql(queue)} AND subscription = {_sql(subscription)}"
        retry_commit(lambda p=predicate: DeltaTable(location, storage_options=options).delete(p))


def append_history(home: str, rows: Sequence[Mapping[str, Any]], app_id: str, version: int,
                   storage_options: Mapping[str, str] | None = None) -> bool:
    """Append history rows once per (``app_id``, ``version``): a replayed controller batch
    finds its transaction in the table's log and writes nothing. True if it wrote."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    location, options = control_path(home, "history"), dict(storage_options or {}) or None
    if DeltaTable.is_deltatable(location, storage_options=options):
        table = DeltaTable(location, storage_options=options)
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            rows = _missing_transitions(table, rows)
            if rows:  # a replayed batch saw transitions the first attempt did not: add only those
                write_deltalake(location, pa.Table.from_pylist(rows, schema=history_schema()), mode="append",
                                storage_options=options)
            return False
    if not rows:
        return False
    write_deltalake(location, pa.Table.from_pylist(list(rows), schema=history_schema()), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
                    storage_options=options)
    return True


TRANSITIONS = ("stopped", "resumed")


def _missing_transitions(table: DeltaTable, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The transition rows not in the history yet; a transition is unique by queue, subscription,
    event and flowStoppedCount (the n-th stop and the resume after it happen once)."""
    wanted = [dict(r) for r in rows if r["event"] in TRANSITIONS]
    if not wanted:
        return []
    key = ("queue", "subscription", "event", "flow_stopped_count")
    seen = {tuple(r[k] for k in key) for r in table.to_pyarrow_table(columns=list(key)).to_pylist()
            if r["event"] in TRANSITIONS}
    return [r for r in wanted if tuple(r[k] for k in key) not in seen]


def _sql(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
