"""The controller's source, ``format("flowcontrol")``: each micro-batch, one observation per
queue and subscription of the home's registry (depth, recorded settings, recorded flow state),
plus the operator commands issued since the last batch.

Offsets are ``{"tick": n, "commands": id}``: every trigger is a new look, and the commands up to
``id`` belong to that batch, so a replayed batch applies the same commands.

The queues are looked at in ``partitions()``, which Spark runs in the source's one long-lived
process: the queue handles opened there stay open between micro-batches, so a look reads only
what changed since the last one (the ledger's new commits, a state table's new version) and
never opens a queue again. Read tasks run in whichever Python worker is free, where every
worker would open every queue once more. The looks overlap (deltalake releases the GIL while
it reads storage); the queues a consumer writes to are looked at after them, once per batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit

from spark_flow.exceptions import ConfigurationError
from spark_flow.flow.drain import measured_backlog
from spark_flow.flow.expiry import expire
from spark_flow.flow.homeflow import open_home
from spark_flow.flow.looks import look_at_each
from spark_flow.flow.queue import open_queue
from spark_flow.records.commands import HOME_COMMANDS, CommandLog
from spark_flow.records.home import Registry
from spark_flow.records.subscriptions import Subscription
from spark_flow.rules.columns import ddl
from spark_flow.rules.flow_state import THRESHOLD_COLUMNS, producers_held
from spark_flow.rules.keys import pattern_matches, split_options
from spark_flow.rules.names import normalize_path
from spark_flow.rules.pace import paced
from spark_flow.rules.storage_options import storage_options
from spark_flow.rules.units import parse_count
from spark_flow.spark.offsets import Offset

log = logging.getLogger("spark_flow.controller.query")

#: The key of command rows: no subscription has an empty name.
COMMANDS_KEY = ""

OBSERVATION_SCHEMA = (
    "kind STRING, queue STRING, path STRING, subscription STRING, observed_at BIGINT, position BIGINT, "
    f"latest BIGINT, depth_count BIGINT, depth_size BIGINT, oldest_enqueue BIGINT, {ddl(THRESHOLD_COLUMNS)}, "
    "producers_stopped BOOLEAN, "
    "stall_timeout DOUBLE, stalled_policy STRING, recorded_stopped BOOLEAN, recorded_count BIGINT, "
    "recorded_transition BIGINT, backpressured BOOLEAN, discarded_count BIGINT, expired_count BIGINT, "
    "dead_lettered_count BIGINT, drain_rate DOUBLE, admitted_rate DOUBLE, pacing_producers BIGINT, "
    "command_id BIGINT, command STRING, settings STRING"
)
#: One observation (or command) as the source yields it, in :data:`OBSERVATION_SCHEMA`'s order.
ObservationRow = tuple[Any, ...]


@dataclass(frozen=True)
class ObservePartition(InputPartition):
    """Observations one read task yields; the first task also reads the commands to apply."""

    rows: tuple[ObservationRow, ...]
    commands_after: int = -1
    commands_upto: int = -1
    home: str = ""
    storage_options: Mapping[str, str] = field(default_factory=dict)


class FlowControlDataSource(DataSource):
    """``spark.readStream.format("flowcontrol").option("home", home)``: one observation per queue
    and subscription of the home's registry each micro-batch, plus the operator commands issued
    since the last one. Options: ``home``, ``maxPartitions`` (read tasks, default 2),
    ``spark.flow.storage.*`` (deltalake storage options). Each queue is judged with its recorded settings, as its gates judge it."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        own, _producer, conf = split_options(options, ("home", "maxPartitions"))
        if not own.get("home"):
            raise ConfigurationError("home", own.get("home"), "the control plane's location (spark.flow.home)")
        self.home = normalize_path(own["home"])
        self.max_partitions = parse_count("maxPartitions", own.get("maxPartitions", 2), minimum=1)
        self.storage_options = storage_options(conf)

    @classmethod
    def name(cls) -> str:
        return "flowcontrol"

    def schema(self) -> str:
        return OBSERVATION_SCHEMA

    def streamReader(self, schema: Any) -> ObservationReader:
        return ObservationReader(self.home, self.max_partitions, self.storage_options)


class ObservationReader(DataSourceStreamReader):
    """Offsets ``{"tick": n, "commands": id}``: every trigger is a new look, and the commands up
    to ``id`` belong to that batch, so a replayed batch applies the same commands."""

    def __init__(self, home: str, max_partitions: int, storage: Mapping[str, str]) -> None:
        self.home = home
        self.max_partitions = max_partitions
        self.storage_options = storage

    def initialOffset(self) -> Offset:
        """Before the first look, with no command applied."""
        return {"tick": 0, "commands": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        """Every command issued since the last batch belongs to the next one."""
        return ReadAllAvailable()

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """A new tick every trigger (so every trigger runs a batch that looks at every queue),
        with the newest command id."""
        return {"tick": start["tick"] + 1, "commands": max(CommandLog(self.home, self.storage_options).latest(), start["commands"])}

    def partitions(self, start: Offset, end: Offset) -> list[ObservePartition]:
        """Look at the home's queues now (see the module's docstring) and hand the observations
        to up to ``maxPartitions`` tasks; the first also reads the commands."""
        rows = observe(open_home(self.home, self.storage_options).registry.queues(), self.storage_options)
        parts = max(1, min(self.max_partitions, len(rows)))
        return [ObservePartition(tuple(rows[i::parts]), start["commands"] if i == 0 else -1,
                                 end["commands"] if i == 0 else -1, self.home, self.storage_options)
                for i in range(parts)]

    def read(self, partition: InputPartition) -> Iterator[ObservationRow]:
        """One observation per queue and subscription, then one row per command and queue it targets."""
        assert isinstance(partition, ObservePartition)  # made by partitions() above
        yield from partition.rows
        if partition.commands_upto > partition.commands_after:
            yield from command_rows(partition.home, partition.storage_options, partition.commands_after,
                                    partition.commands_upto)

    def commit(self, end: Offset) -> None:
        """Nothing to acknowledge: observations are looked at again, commands are kept."""


_OBSERVATION_FIELDS = [part.strip().split(" ")[0] for part in OBSERVATION_SCHEMA.split(",")]


def command_rows(home: str, storage: Mapping[str, str], after: int, upto: int) -> Iterator[ObservationRow]:
    """One row per command issued after id ``after`` through ``upto`` and queue it targets (a
    home's command: one row)."""
    names = dict(Registry(home, storage).queues())
    for command in CommandLog(home, storage).read(after, upto):
        targets = [] if command.command in HOME_COMMANDS else [
            n for n in names if n == command.target or pattern_matches(command.target, n)]
        for queue in targets or [command.target]:
            yield _row(kind="command", queue=queue, path=names.get(queue), subscription=COMMANDS_KEY,
                       observed_at=now_ms(), command_id=command.id, command=command.command,
                       settings=json.dumps(dict(command.settings)))


def as_observation(row: ObservationRow) -> dict[str, Any]:
    """An observation (or command) row as the step takes it: a dict of every field."""
    return dict(zip(_OBSERVATION_FIELDS, row, strict=True))


def _row(**values: Any) -> ObservationRow:
    return tuple(values.get(name) for name in _OBSERVATION_FIELDS)


def now_ms() -> int:
    return int(time.time() * 1000)


def observe(queues: Mapping[str, str], storage: Mapping[str, str]) -> list[ObservationRow]:
    """One observation per queue (name -> path) and subscription (the queues looked at as
    :func:`~spark_flow.flow.looks.look_at_each` does), then whether each consumer is held back
    by the queues it writes to, each of those looked at once."""
    looks = look_at_each(queues, storage, lambda name, path: _look(name, path, storage)).values()
    stopped: dict[str, bool] = {}
    rows = []
    for sub, row in (entry for look in looks for entry in look):
        for path in sub.downstream:
            if path not in stopped:
                stopped[path] = _stopped(path, storage)
        rows.append(_row(backpressured=any(stopped[path] for path in sub.downstream), **row))
    return rows


def _look(name: str, path: str, storage: Mapping[str, str]) -> list[tuple[Subscription, dict[str, Any]]]:
    """Each subscription of a queue with its observation but for ``backpressured``: depth, the
    queue's recorded settings, the recorded flow state, its drain and a paced queue's pace as
    this process measures them (:mod:`spark_flow.flow.drain`). Nothing for a queue that cannot
    be read (dropped: its keys time out)."""
    try:
        queue = open_queue(path, storage)
        latest = queue.refresh()
        settings = queue.settings()
        expire(queue, settings)
        looks = []
        for sub, depth, drained in measured_backlog(queue):
            transition = sub.last_transition
            pace = paced(settings, depth.count, drained)
            looks.append((sub, dict(
                kind="observe", queue=name, path=queue.path, subscription=sub.name, observed_at=now_ms(),
                position=sub.position, latest=latest, depth_count=depth.count, depth_size=depth.size,
                oldest_enqueue=depth.oldest, **asdict(settings.thresholds),
                producers_stopped=settings.producers_stopped, stall_timeout=settings.stall_timeout,
                stalled_policy=settings.stalled_consumer_policy, recorded_stopped=sub.flow_stopped,
                recorded_count=sub.flow_stopped_count,
                recorded_transition=int(transition.timestamp() * 1000) if transition else None,
                discarded_count=sub.discarded_count, expired_count=sub.expired_count,
                dead_lettered_count=sub.dead_lettered_count, drain_rate=drained.rate,
                admitted_rate=None if pace is None else pace.rate,
                pacing_producers=None if pace is None else pace.producers,
            )))
        return looks
    except Exception as error:  # a queue dropped or unreadable: its keys time out
        log.warning("cannot observe queue %r at %s: %s", name, path, error)
        return []


def _stopped(path: str, storage: Mapping[str, str]) -> bool:
    """Whether the queue at ``path`` holds its producers (flow-stopped, stopped by an operator,
    or its home flow-stopped), as recorded."""
    try:
        queue = open_queue(path, storage)
        queue.refresh()
        settings = queue.settings()
        home = queue.home
        home_stopped = home is not None and settings.flow_controlled and open_home(home, storage).recorded_stopped()
        return producers_held(flow_stopped=(s.flow_stopped for s in queue.subscriptions.list()),
                              producers_stopped=settings.producers_stopped, home_stopped=home_stopped)
    except Exception as error:  # dropped or unreadable: it holds nobody
        log.warning("cannot look at downstream queue %s: %s", path, error)
        return False
