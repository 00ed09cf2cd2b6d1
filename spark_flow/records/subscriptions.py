"""The subscriptions of one queue: ack positions and flow state, in a small Delta table.

One row per subscription. Consumers move its ack position forward (``position``, the last
queue version they acknowledged whole, and ``index``, the messages of the next version they
acknowledged too), gates record flow transitions. Every change is a MERGE into a
:class:`~spark_flow.store.tables.RecordTable` whose monotonic or compare-and-set predicate makes a
replayed or raced update harmless: no lock, and no SparkSession (it runs in Python data source
workers).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import QueueNotFoundError, SubscriptionInUseError, SubscriptionNotFoundError
from spark_flow.rules.depth import Position
from spark_flow.rules.flow_state import FlowState
from spark_flow.store.table import Merge, sql_string
from spark_flow.store.tables import Owner, RecordTable, one_row

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_SUBSCRIPTION = "default"


@dataclass(frozen=True)
class Subscription:
    """One subscription's row: where it has acknowledged up to, its flow state, and the queues
    its consumer writes to (``downstream``: while one of them is stopped, the consumer is held
    back by backpressure, not stalled)."""

    name: str
    position: int
    flow_stopped: bool = False
    flow_stopped_count: int = 0
    last_transition: datetime | None = None
    discarded_count: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    downstream: tuple[str, ...] = ()
    reader: str | None = None
    reader_seen: datetime | None = None
    reader_process: str | None = None
    index: int = 0
    last_transition_detail: str | None = None  # what the last transition saw (JSON, spark_flow.records.transitions)
    expired_count: int = 0
    dead_lettered_count: int = 0
    delivery: str | None = None  # a failed batch's redelivery in progress (JSON, spark_flow.spark.dead_letters)
    acked_at: datetime | None = None  # when the position last moved (None: before this column): a stall's clock

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Subscription:
        """A row as the table keeps it: ``downstream`` comma-separated, and no value in the
        columns a row from an older spark-flow lacks (``index``, the counts)."""
        downstream = tuple(p for p in (row.get("downstream") or "").split(",") if p)
        counts = {name: row.get(name) or 0 for name in ("index", "expired_count", "dead_lettered_count")}
        return cls(**{**row, "downstream": downstream, **counts})

    @property
    def acknowledged(self) -> Position:
        """The ack position: every message up to here is acknowledged."""
        return Position(self.position, self.index)

    @property
    def flow_state(self) -> FlowState:
        """The flow state recorded for the subscription: ``flowStopped``, ``flowStoppedCount``."""
        return FlowState(self.flow_stopped, self.flow_stopped_count)


def _schema() -> pa.Schema:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [
            pa.field("name", pa.string(), nullable=False),
            pa.field("position", pa.int64(), nullable=False),
            pa.field("flow_stopped", pa.bool_(), nullable=False),
            pa.field("flow_stopped_count", pa.int64(), nullable=False),
            pa.field("last_transition", ts),
            pa.field("discarded_count", pa.int64(), nullable=False),
            pa.field("created_at", ts),
            pa.field("updated_at", ts),
            pa.field("downstream", pa.string()),
            pa.field("reader", pa.string()),
            pa.field("reader_seen", ts),
            pa.field("reader_process", pa.string()),
            pa.field("index", pa.int64()),
            pa.field("last_transition_detail", pa.string()),
            pa.field("expired_count", pa.int64()),
            pa.field("dead_lettered_count", pa.int64()),
            pa.field("delivery", pa.string()),
            pa.field("acked_at", ts),
        ]
    )


#: Columns added after the table's first version, with their deltalake types.
_LATER_COLUMNS = {"index": "long", "last_transition_detail": "string", "expired_count": "long",
                  "dead_lettered_count": "long", "delivery": "string",
                  "acked_at": "timestamp"}

#: Seconds a subscription's reader may go unseen before it is taken to be gone (the ``flowqueue``
#: source's default ``readerTimeout``: a live query renews its claim three times as often).
READER_TIMEOUT = 30.0

#: This process, as claims record it: ``host:pid``.
PROCESS = f"{socket.gethostname()}:{os.getpid()}"


def process_gone(process: str | None, seen: datetime | None, timeout: float) -> bool:
    """Whether the holder of a claim is gone: not seen for ``timeout`` seconds, or its process
    (``host:pid``) on this host has ended or is ending."""
    if age(seen) > timeout:
        return True
    pid = _local_pid(process)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _ending(pid)


def _local_pid(process: str | None) -> int | None:
    """The process id of a claim's holder (``host:pid``) if it runs on this host, else None."""
    host, _, pid = (process or "").rpartition(":")
    return int(pid) if host == socket.gethostname() and pid.isdigit() else None


#: How long a claim looks again at a holder whose process on this host still runs before it
#: refuses: Spark's SIGTERM to a stopped query's source process takes effect once the kernel
#: runs that process (CI: a claim right after the signal found it not exiting yet, on a busy
#: machine).
ENDING_GRACE_SECONDS = 1.0


def _gone_soon(sub: Subscription, timeout: float) -> bool:
    """Whether the holder of ``sub``'s claim is gone (:func:`process_gone`), or its process on
    this host is within :data:`ENDING_GRACE_SECONDS`."""
    deadline = time.monotonic() + ENDING_GRACE_SECONDS
    while not process_gone(sub.reader_process, sub.reader_seen, timeout):
        if _local_pid(sub.reader_process) is None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


#: Linux's flag of a process that is exiting (``PF_EXITING``): set as it starts to exit, kept
#: while it is a zombie its parent has not reaped.
_PF_EXITING = 0x4


def _ending(pid: int) -> bool:
    """Whether process ``pid`` is exiting, which ``os.kill(pid, 0)`` does not tell until its
    parent reaps it. Spark ends a source's Python process with SIGTERM and returns from
    ``query.stop()`` without waiting: that process frees its memory, then waits for the JVM to
    reap it. False where there is no ``/proc`` (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()  # after the name, which may hold spaces
    except OSError:
        return False
    return bool(int(fields[6]) & _PF_EXITING)  # the flags, the 9th field of proc(5)'s stat


def age(seen: datetime | None) -> float:
    """Seconds since ``seen``."""
    return (datetime.now(UTC) - seen).total_seconds() if seen is not None else float("inf")


class FlowRowTable:
    """Rows of flow state keyed by name, at ``location``: a queue's subscriptions
    (:class:`SubscriptionTable`) and a home's one row (its home-wide flow state) are recorded
    alike, so one recorder (:class:`~spark_flow.flow.recorder.FlowRecorder`) steps both.
    ``queue`` names the queue (or the home) in errors; rows are written while ``owner``, the
    queue, is there."""

    def __init__(self, location: str, queue: str, storage_options: Mapping[str, str] | None = None, *,
                 owner: Owner | None = None) -> None:
        self.location = location
        self.queue = queue
        self._table = RecordTable(location, storage_options, owner=owner)
        self._listed: tuple[int, list[Subscription]] = (-1, [])  # the last list read, by table version
        self._columns_ready = False

    def create_table(self) -> bool:
        """Create the table if it is not there yet; True if this call created it."""
        return self._table.create(_schema())

    def list(self) -> list[Subscription]:
        """Every subscription, by name; the table is read again only when it has a new version
        (a gate lists them on every look at the queue)."""
        table = self._table.open()
        if table is None:
            raise QueueNotFoundError(self.queue, f"its subscriptions table at {self.location} is missing: declare it again")
        version = table.version()
        if self._listed[0] != version:
            rows = table.rows()
            self._listed = (version, sorted((Subscription.from_row(row) for row in rows), key=lambda s: s.name))
        return list(self._listed[1])

    def get(self, name: str) -> Subscription:
        """One subscription; raises if it does not exist."""
        for sub in self.list():
            if sub.name == name:
                return sub
        raise SubscriptionNotFoundError(self.queue, name, [s.name for s in self.list()])

    def create(self, name: str, position: int) -> bool:
        """Create a subscription acknowledged up to queue version ``position``; False if it
        already existed."""
        now = datetime.now(UTC)
        row = {"name": name, "position": position, "index": 0, "flow_stopped": False, "flow_stopped_count": 0,
               "last_transition": None, "discarded_count": 0, "expired_count": 0, "dead_lettered_count": 0,
               "created_at": now, "updated_at": now, "acked_at": now}
        inserted = self._merge(row, insert={key: f"s.{key}" for key in row}
                               | {"downstream": "NULL", "reader": "NULL", "reader_seen": "NULL", "reader_process": "NULL",
                                  "delivery": "NULL"})
        return bool(inserted["num_target_rows_inserted"] > 0)

    def transition(self, before: Subscription, flow_stopped: bool, flow_stopped_count: int,
                   detail: str, at: datetime | None = None) -> Subscription | None:
        """Record a flow transition, with ``detail`` (what it saw), if the row still shows
        ``before`` (compare and set); returns the row as it now is. Its time is ``at``, when the
        depth was seen (default: now).

        None means another gate recorded a transition first; the caller reads again.
        """
        now = at or datetime.now(UTC)
        row = {"name": before.name, "flow_stopped": flow_stopped, "flow_stopped_count": flow_stopped_count,
               "detail": detail, "was_stopped": before.flow_stopped, "was_count": before.flow_stopped_count, "now": now}
        metrics = self._merge(row, update={"flow_stopped": "s.flow_stopped", "flow_stopped_count": "s.flow_stopped_count",
                                           "last_transition": "s.now", "last_transition_detail": "s.detail",
                                           "updated_at": "s.now"},
                              update_when="t.flow_stopped = s.was_stopped AND t.flow_stopped_count = s.was_count")
        if not metrics["num_target_rows_updated"]:
            return None
        return replace(before, flow_stopped=flow_stopped, flow_stopped_count=flow_stopped_count, last_transition=now,
                       last_transition_detail=detail, updated_at=now)

    def _add_columns(self) -> None:
        """Add the columns later versions brought to a table an older spark-flow created: its
        rows read ``index`` as 0 (whole-commit positions) and no transition detail."""
        if not self._columns_ready:
            self._table.add_columns(_LATER_COLUMNS)
            self._columns_ready = True

    def _merge(self, row: dict[str, Any], *, update: Mapping[str, str] | None = None, update_when: str | None = None,
               insert: Mapping[str, str] | None = None) -> dict[str, Any]:
        """MERGE one row keyed by name."""
        self._add_columns()
        return self._table.merge(one_row(row), Merge("t.name = s.name", update=update, update_when=update_when,
                                                     insert=insert))


class SubscriptionTable(FlowRowTable):
    """The subscriptions table of one queue: each row a subscription's flow state, and its ack
    position, reader, downstream queues and a failed batch's redelivery in progress."""

    def drop(self, name: str) -> None:
        """Drop a subscription: it no longer counts in the queue's depth."""
        self.get(name)
        self._table.delete(f"name = {sql_string(name)}")

    def acknowledge(self, name: str, position: Position | int, discarded: int = 0, expired: int = 0,
                    reader: str | None = None) -> bool:
        """Move ``name`` forward to ``position`` (a queue version: all of its messages), never
        backward; True if it moved.

        ``discarded`` counts messages skipped without delivery (ring queues, a stalled consumer
        skipped), ``expired`` those skipped as older than the queue's ``messageTtl``. A ``reader`` (a
        streaming query, see :meth:`claim`) acknowledges only while it holds the subscription:
        a reader another took over raises instead of moving a position it no longer owns.
        A position already reached writes nothing (a source acknowledges each batch twice:
        at the next batch's start and in ``commit``).
        """
        position = Position.of(position)
        if self.get(name).acknowledged >= position:
            return self._not_moved(name, reader)
        row = {"name": name, "position": position.version, "index": position.index, "discarded": discarded,
               "expired": expired, "now": datetime.now(UTC)}
        update = {"position": "s.position", "index": "s.index", "updated_at": "s.now", "acked_at": "s.now",
                  "discarded_count": "t.discarded_count + s.discarded",
                  "expired_count": "coalesce(t.expired_count, 0) + s.expired"}
        predicate = "(s.position > t.position OR (s.position = t.position AND s.index > coalesce(t.index, 0)))"
        if reader is not None:
            row["reader"] = reader
            update |= {"reader": "s.reader", "reader_seen": "s.now"}
            predicate += " AND (t.reader IS NULL OR t.reader = s.reader)"
        metrics = self._merge(row, update=update, update_when=predicate)
        return metrics["num_target_rows_updated"] > 0 or self._not_moved(name, reader)

    def _not_moved(self, name: str, reader: str | None) -> bool:
        """An acknowledgement that did not move ``name``: raises if another reader holds it."""
        sub = self.get(name)  # raises for an unknown subscription
        if reader is not None and sub.reader not in (None, reader):
            raise SubscriptionInUseError(self.queue, name, sub.reader, age(sub.reader_seen), None)
        return False

    def add_downstream(self, name: str, paths: Sequence[str]) -> None:
        """Record queues the consumer of ``name`` writes to (kept with those recorded before;
        compare and set, so two writers adding different queues keep both)."""
        while True:
            sub = self.get(name)
            wanted = tuple(sorted({*sub.downstream, *paths}))
            if wanted == sub.downstream:
                return
            row = {"name": name, "downstream": ",".join(wanted), "was": ",".join(sub.downstream)}
            metrics = self._merge(row, update={"downstream": "s.downstream"},
                                  update_when="coalesce(t.downstream, '') = s.was")
            if metrics["num_target_rows_updated"]:
                return

    def claim(self, name: str, reader: str, timeout: float) -> None:
        """Record ``reader`` (a streaming query) as the one reading ``name``, seen now.

        Refused while another reader holds it that is alive: seen within ``timeout`` seconds,
        and, on this host, its process still running (Spark ends a stopped query's source
        process without a word to it, so that is how a stopped query lets go at once). Two
        queries acknowledging one subscription would each skip what the other read. The
        takeover is a compare-and-set on the holder read, so two claimants cannot both win."""
        while True:
            sub = self.get(name)
            if sub.reader not in (None, reader) and not _gone_soon(sub, timeout):
                raise SubscriptionInUseError(self.queue, name, sub.reader, age(sub.reader_seen), timeout)
            row = {"name": name, "reader": reader, "process": PROCESS, "now": datetime.now(UTC),
                   "was": sub.reader or ""}
            metrics = self._merge(row, update={"reader": "s.reader", "reader_seen": "s.now", "reader_process": "s.process"},
                                  update_when="coalesce(t.reader, '') = s.was")
            if metrics["num_target_rows_updated"]:
                return

    def record_delivery(self, name: str, was: str | None, delivery: str | None, dead_lettered: int = 0) -> bool:
        """Record the progress of a failed batch's redelivery (``delivery``, JSON: a
        :class:`spark_flow.spark.dead_letters.Delivery`) if the row still shows ``was`` (compare and set), adding ``dead_lettered`` to the
        messages moved to the dead-letter queue in the same write, so a replayed step counts
        nothing twice. False if the row shows another progress (the caller reads again)."""
        row = {"name": name, "delivery": delivery, "was": was or "", "moved": dead_lettered}
        metrics = self._merge(row, update={"delivery": "s.delivery",
                                           "dead_lettered_count": "coalesce(t.dead_lettered_count, 0) + s.moved"},
                              update_when="coalesce(t.delivery, '') = s.was")
        return bool(metrics["num_target_rows_updated"])
