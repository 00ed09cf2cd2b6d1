"""The queue handle: a declared queue read through its Delta log, its depth and its acks.

A queue is an append-only Delta table with Change Data Feed on, its limits in ``flow.*`` table
properties, and its own small tables at its state location (``flow.stateLocation``):
subscriptions, transition history, run-time settings and hold times. Positions are the table's
commit versions with a message index inside a commit (:class:`~spark_flow.rules.depth.Position`):
the queue's own log is the queue. A :class:`Queue` needs no SparkSession (it reads the log with
the store), so the same code runs on the driver and in Python data source workers; declaring
a queue (:mod:`spark_flow.spark.declare`) needs Spark, because catalog tables and DDL live there. A
queue deleted (``FlowAdmin.delete_queue``, ``DROP TABLE``, its directory removed) raises
:class:`QueueNotFoundError` at every process's next look, and its state is never written again
(:class:`~spark_flow.store.tables.Owner`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from spark_flow.exceptions import ConfigurationError, PositionOutOfRangeError, QueueNotFoundError, UnknownKeyError
from spark_flow.flow.recorder import FlowRecorder
from spark_flow.records.consumer_starts import ConsumerStarts
from spark_flow.records.hold_times import HoldTimes
from spark_flow.records.runtime_settings import RUNTIME_SETTINGS_FOLDER, RuntimeSettings
from spark_flow.records.subscriptions import DEFAULT_SUBSCRIPTION, Subscription, SubscriptionTable
from spark_flow.records.transitions import TransitionTable
from spark_flow.rules.depth import Depth, Position
from spark_flow.rules.names import normalize_path, queue_name, state_member
from spark_flow.rules.settings import QueueSettings, queue_settings
from spark_flow.store.handles import forget, shared
from spark_flow.store.ledger import Ledger
from spark_flow.store.messages import plain_schema, read_messages
from spark_flow.store.table import is_table, open_table, retry_commit
from spark_flow.store.tables import Owner

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

QUEUE_NAME = "flow.queueName"
STATE_LOCATION = "flow.stateLocation"
#: The catalog table a queue was declared as (its full name): only Spark can drop it.
CATALOG_TABLE = "flow.catalogTable"
#: The tables at a queue's state location (:func:`~spark_flow.rules.names.state_member`): its
#: subscriptions, transition history, run-time settings, hold times, writer claims and the
#: starts of its consumers through the engine.
SUBSCRIPTIONS, HISTORY, HOLDS, WRITERS, STARTS = "subscriptions", "history", "holds", "writers", "starts"
STATE_TABLES = (SUBSCRIPTIONS, HISTORY, RUNTIME_SETTINGS_FOLDER, HOLDS, WRITERS, STARTS)
#: The home a queue was declared in (``spark.flow.home``): whose home-wide limits hold its producers.
HOME_PROPERTY = "flow.home"
#: The ``txnAppId`` of purge commits; its ``txnVersion`` is the queue version purged through.
PURGE_APP_ID = "spark-flow/purge"

StartingPosition = Literal["earliest", "latest"] | int


class Queue:
    """A declared queue, read through its Delta log.

    Parameters
    ----------
    path : str
        The queue table's location.
    storage_options : mapping, optional
        deltalake storage options (credentials of object stores).
    """

    def __init__(self, path: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.path = normalize_path(path)
        self.storage_options = dict(storage_options or {})
        if not is_table(self.path, self.storage_options):
            raise QueueNotFoundError(self.path, "there is no Delta table at this location")
        self._table = open_table(self.path, self.storage_options)
        properties = self._table.properties()
        if STATE_LOCATION not in properties:
            raise QueueNotFoundError(self.path, "this Delta table is not declared as a queue (spark_flow.spark.declare)")
        self.name: str = properties.get(QUEUE_NAME) or queue_name(self.path)
        self.ledger = Ledger(self._table)
        state = properties[STATE_LOCATION]
        self.owner = Owner(self.name, self._table, state)
        kept, owner = self.storage_options, self.owner  # the state tables are written while the queue is there
        self.subscriptions = SubscriptionTable(state_member(state, SUBSCRIPTIONS), self.name, kept, owner=owner)
        self.history = TransitionTable(state_member(state, HISTORY), self.name, kept, owner=owner)
        self.runtime_settings = RuntimeSettings(state_member(state, RUNTIME_SETTINGS_FOLDER), kept, owner=owner)
        self.hold_times = HoldTimes(state_member(state, HOLDS), kept, owner=owner)
        self.consumer_starts = ConsumerStarts(state_member(state, STARTS), kept, owner=owner)
        self.recorder = FlowRecorder(self.subscriptions, self.history,
                                     lambda sub: f"queue {self.name!r} subscription {sub!r}")
        self._settings: tuple[tuple[dict[str, str], dict[str, str]], QueueSettings] | None = None

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, path={self.path!r})"

    def refresh(self) -> int:
        """Catch up with the queue's log; return its latest version.

        Raises :class:`QueueNotFoundError` once the queue's table is gone: deltalake's catch-up
        finds no new commit in a deleted log and keeps the state it had, which a held producer
        would judge for ever. So a look that finds nothing new checks that the newest commit is
        still there (one request)."""
        before = self._table.version()
        with self.owner.failing_as_gone():  # the engine's look fails once the table is gone
            latest = self.ledger.refresh()
        if latest == before and not self.owner.exists():
            forget("queue", self.path)  # a queue declared again at this path gets a new handle
            raise self.owner.gone()
        return latest

    def has_news(self) -> bool:
        """Whether the queue has a commit after the version its handle read (one request)."""
        return self._table.has_commit(self._table.version() + 1)

    def version(self) -> int:
        """The queue's latest version as of the last :meth:`refresh`."""
        return self._table.version()

    def properties(self) -> dict[str, str]:
        """The queue table's properties as of the last refresh."""
        return self._table.properties()

    @property
    def home(self) -> str | None:
        """The home the queue was declared in, None if none: its home-wide limits hold the
        queue's producers too."""
        return self.properties().get(HOME_PROPERTY)

    @property
    def state_location(self) -> str:
        """Where the queue's subscriptions, history and run-time settings live."""
        return self.properties()[STATE_LOCATION]

    def settings(self) -> QueueSettings:
        """The queue settings in force, as every process judges the queue: run-time settings
        (``set``, ``stop-producers``) over table properties (as of the last :meth:`refresh`)
        over defaults; parsed again only when one of them changed (a gate looks at them on
        every look at the queue)."""
        recorded = (self.properties(), self.runtime_settings.current())
        if self._settings is None or self._settings[0] != recorded:
            self._settings = (recorded, queue_settings(self.name, *recorded))
        return self._settings[1]

    def schema(self) -> pa.Schema:
        """The messages' schema (the table's columns) as Arrow, with the plain string and binary
        types Spark expects where deltalake reads view types."""
        return plain_schema(self._table.arrow_schema())

    def spark_schema(self) -> StructType:
        """The messages' schema as Spark types, exactly as the Delta log records it (variant,
        nested nullability), for checking a batch before it is written."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self._table.schema_json()))

    def backlog(self, refresh: bool = True) -> list[tuple[Subscription, Depth]]:
        """Every subscription with its depth (the messages after its ack position), then the
        ledger forgets the commits they have all acknowledged. ``refresh=False`` counts up to
        the version last read."""
        latest = self.refresh() if refresh else self.version()
        subs = self.subscriptions.list()
        backlog = [(sub, self.ledger.depth(sub.acknowledged, latest)) for sub in subs]
        if subs:
            self.ledger.forget(min(sub.position for sub in subs))
        return backlog

    def depths(self, refresh: bool = True) -> dict[str, Depth]:
        """The depth of every subscription, by name."""
        return {sub.name: depth for sub, depth in self.backlog(refresh)}

    def depth(self, subscription: str = DEFAULT_SUBSCRIPTION) -> Depth:
        """The depth of one subscription."""
        latest = self.refresh()
        return self.ledger.depth(self.subscriptions.get(subscription).acknowledged, latest)

    def earliest_position(self) -> int:
        """The position before the oldest message the queue still keeps: the last purge's floor
        (recorded in its commit as a transaction of :data:`PURGE_APP_ID`), -1 if never purged."""
        self.refresh()
        floor = self._table.transaction_version(PURGE_APP_ID)
        return -1 if floor is None else floor

    def create_subscription(self, name: str, position: StartingPosition = "earliest") -> Subscription:
        """Create subscription ``name`` (no-op if it exists) and return it.

        ``earliest`` starts at the oldest message still kept, ``latest`` after the newest one,
        an int after that queue version.
        """
        if not isinstance(name, str) or not name.strip():
            raise UnknownKeyError("subscription", name, None)
        if position == "earliest":
            start = self.earliest_position()
        elif position == "latest":
            start = self.refresh()
        elif isinstance(position, int) and not isinstance(position, bool) and position >= -1:
            start = position
            if start < self.earliest_position():
                raise ConfigurationError("startingPosition", position,
                                         f"a queue version >= {self.earliest_position()}: the messages up to it "
                                         f"were purged from queue {self.name!r}")
        else:
            raise ConfigurationError("startingPosition", position, "earliest, latest, or a queue version >= -1")
        self.subscriptions.create(name, start)
        return self.subscriptions.get(name)

    def drop_subscription(self, name: str) -> None:
        """Drop subscription ``name``: it stops counting in the depth and holding producers."""
        self.subscriptions.drop(name)

    def acknowledge(self, subscription: str, position: Position | int, *, reader: str | None = None,
                    discarded: int = 0, expired: int = 0) -> bool:
        """Acknowledge every message up to ``position`` (a queue version: all of its messages)
        for ``subscription`` (monotonic); True if the position moved. Every acknowledgement goes
        through here: consumers, ring discards and the controller's eviction of a stalled
        subscription.

        A position the queue has not reached yet raises :class:`PositionOutOfRangeError`: it
        would acknowledge messages that were never delivered. ``reader``: the streaming query
        acknowledging (see :meth:`SubscriptionTable.claim`); ``discarded``, ``expired``: of the
        messages acknowledged, how many were skipped without delivery (discarded by a ring or
        a stalled consumer's eviction; expired)."""
        position = Position.of(position)
        if position.reached > self.version() and position.reached > self.refresh():
            raise PositionOutOfRangeError(self.name, subscription, position.version, self.version())
        return self.subscriptions.acknowledge(subscription, position, discarded=discarded, expired=expired,
                                              reader=reader)

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txnVersion`` committed by ``app_id`` (as of the last refresh), or None."""
        return self._table.transaction_version(app_id)

    def append_once(self, rows: pa.Table, user_metadata: str, transaction: tuple[str, int]) -> bool:
        """Append ``rows`` as one commit with ``user_metadata`` under the app ``transaction``
        (``txnAppId``, ``txnVersion``), unless that transaction is in already: a replayed step
        writes nothing twice. True if it wrote."""

        def attempt() -> bool:
            self.refresh()
            done = self.transaction_version(transaction[0])
            if done is not None and done >= transaction[1]:
                return False
            self._table.append(rows, transaction=transaction, user_metadata=user_metadata)
            return True

        return retry_commit(attempt)

    def live_files(self, version: int | None = None) -> dict[str, tuple[int, int]]:
        """The queue's data files (path -> bytes, rows) now, or as of ``version``."""
        table = self._table if version is None else open_table(self.path, self.storage_options, version=version)
        return table.live_files()

    def remove_files(self, files: Mapping[str, int], transaction: tuple[str, int], user_metadata: str) -> None:
        """Commit the removal of ``files`` (path -> bytes) that no reader sees as a change (a purge)."""
        self._table.remove_files(files, transaction=transaction, user_metadata=user_metadata)

    def read(self, after: Position, upto: Position) -> pa.Table:
        """The messages after position ``after`` up to position ``upto``, with ``_position``
        and ``_enqueue_time`` (the commit's version and time), in enqueue order
        (:func:`~spark_flow.store.messages.read_messages`). A read that fails because the queue was
        deleted raises :class:`QueueNotFoundError`."""
        with self.owner.failing_as_gone():
            return read_messages(self._table, self.schema(), after, upto)


def open_queue(path: str, storage_options: Mapping[str, str] | None = None) -> Queue:
    """A :class:`Queue` for ``path``, shared within the process so its ledger stays warm (one
    handle per path and storage options)."""
    return shared("queue", path, storage_options, Queue)
