"""Delta tables as queues: declaring one, and a handle that reads its depth and moves its acks.

A queue is an append-only Delta table with Change Data Feed on, its limits in ``flow.*`` table
properties, and a subscriptions table beside it (``flow.stateLocation``). Positions are the
table's commit versions with a message index inside a commit (:class:`~spark_flow.ledger.Position`):
the queue's own log is the queue. :class:`Queue` needs no SparkSession (it reads the log with
``deltalake``), so the same code runs on the driver and in Python data source workers; :func:`declare` uses Spark, because catalog tables and DDL live there.
"""

from __future__ import annotations

import bisect
import json
import logging
import posixpath
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from spark_flow.config import (
    KEYS,
    PROPERTY_PREFIX,
    QueueSettings,
    conf_settings,
    is_setting,
    queue_setting,
    queue_settings,
    session_flow_conf,
    setting_name,
)
from spark_flow.exceptions import (
    ConfigurationError,
    PositionOutOfRangeError,
    QueueNotFoundError,
    SchemaMismatchError,
    UnknownKeyError,
)
from spark_flow.history import HistoryTable, transition_detail
from spark_flow.holds import HoldTable
from spark_flow.home import HOME_CONF, Registry
from spark_flow.ledger import METADATA_KEY, Commit, Depth, Ledger, Position
from spark_flow.names import QueueRef, normalize_path, queue_name, queue_ref
from spark_flow.overrides import OverrideTable
from spark_flow.state import FlowState, Thresholds
from spark_flow.storage import session_storage_options
from spark_flow.subscriptions import DEFAULT_SUBSCRIPTION, Subscription, SubscriptionTable
from spark_flow.tables import retry_commit, spark_sql_string

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("spark_flow.queue")

QUEUE_NAME = "flow.queueName"
STATE_LOCATION = "flow.stateLocation"
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
        from deltalake import DeltaTable

        self.path = normalize_path(path)
        self.storage_options = dict(storage_options or {})
        options = self.storage_options or None
        if not DeltaTable.is_deltatable(self.path, storage_options=options):
            raise QueueNotFoundError(self.path, "there is no Delta table at this location")
        self._table = DeltaTable(self.path, storage_options=options)
        properties = self._table.metadata().configuration
        if STATE_LOCATION not in properties:
            raise QueueNotFoundError(self.path, "this Delta table is not declared as a queue (spark_flow.declare)")
        self.name: str = properties.get(QUEUE_NAME) or queue_name(self.path)
        self.ledger = Ledger(self._table)
        self.subscriptions = SubscriptionTable(
            posixpath.join(properties[STATE_LOCATION], "subscriptions"), self.name, self.storage_options
        )
        self.history = HistoryTable(posixpath.join(properties[STATE_LOCATION], "history"), self.name,
                                    self.storage_options)
        self.overrides = OverrideTable(posixpath.join(properties[STATE_LOCATION], "overrides"), self.storage_options)
        self.holds = HoldTable(posixpath.join(properties[STATE_LOCATION], "holds"), self.storage_options)
        self._settings: tuple[tuple[dict[str, str], dict[str, str]], QueueSettings] | None = None

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, path={self.path!r})"

    def refresh(self) -> int:
        """Catch up with the queue's log; return its latest version."""
        return self.ledger.refresh()

    def properties(self) -> dict[str, str]:
        """The queue table's properties as of the last refresh."""
        return dict(self._table.metadata().configuration)

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
        recorded = (self.properties(), self.overrides.settings())
        if self._settings is None or self._settings[0] != recorded:
            self._settings = (recorded, queue_settings(self.name, *recorded))
        return self._settings[1]

    def record_conf(self, conf: Mapping[str, Any]) -> QueueSettings:
        """Record the queue settings a process's Spark conf gives explicitly and the queue has
        none recorded for, so every other process judges the queue with them; return the
        settings in force. A conf value that differs from the recorded one is not applied and is
        logged once. The record is a compare-and-set on the table's metadata (a concurrent
        recorder makes it read again), and the whole is checked before it is written."""
        given = conf_settings(self.name, conf, "queue")
        if not given:
            self.refresh()
            return self.settings()

        def attempt() -> dict[str, tuple[str, Any]]:
            from deltalake import DeltaTable

            table = DeltaTable(self.path, storage_options=self.storage_options or None)
            properties, runtime = table.metadata().configuration, self.overrides.settings()
            recorded = {setting_name(k) for k in [*properties, *runtime] if is_setting(k)}
            missing = {name: entry for name, entry in given.items() if name not in recorded}
            if missing:
                queue_settings(self.name, properties, dict(missing.values()), runtime)  # the whole must hold
                table.alter.set_table_properties({PROPERTY_PREFIX + n: str(raw) for n, (_k, raw) in missing.items()},
                                                 raise_if_not_exists=False)
            return missing

        missing = retry_commit(attempt)
        self.refresh()
        settings = self.settings()
        for name, (key, raw) in given.items():
            if name not in missing:
                _report_difference(settings, name, key, raw)
        return settings

    def schema(self) -> pa.Schema:
        """The messages' schema (the table's columns) as Arrow, with the plain string and binary
        types Spark expects where deltalake reads view types."""
        import pyarrow as pa

        return _plain(pa.schema(self._table.schema().to_arrow()))

    def spark_schema(self) -> StructType:
        """The messages' schema as Spark types, exactly as the Delta log records it (variant,
        nested nullability), for checking a batch before it is written."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self._table.schema().to_json()))

    def backlog(self, refresh: bool = True) -> list[tuple[Subscription, Depth]]:
        """Every subscription with its depth (the messages after its ack position), then the
        ledger forgets the commits they have all acknowledged. ``refresh=False`` counts up to
        the version last read."""
        latest = self.refresh() if refresh else self._table.version()
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
                    discarded: int = 0) -> bool:
        """Acknowledge every message up to ``position`` (a queue version: all of its messages)
        for ``subscription`` (monotonic); True if the position moved. Every acknowledgement goes
        through here: consumers, ring discards and the controller's eviction of a stalled
        subscription.

        A position the queue has not reached yet raises :class:`PositionOutOfRangeError`: it
        would acknowledge messages that were never delivered. ``reader``: the streaming query
        acknowledging (see :meth:`SubscriptionTable.claim`); ``discarded``: of the messages
        acknowledged, how many were skipped without delivery."""
        position = Position.of(position)
        if position.reached > self._table.version() and position.reached > self.refresh():
            raise PositionOutOfRangeError(self.name, subscription, position.version, self._table.version())
        return self.subscriptions.acknowledge(subscription, position, discarded=discarded, reader=reader)

    def transition(self, sub: Subscription, after: FlowState, depth: Depth, thresholds: Thresholds) -> bool:
        """Record ``sub``'s flow transition to ``after``, seen at ``depth``: a compare-and-set in
        the subscriptions table (False: another process moved the state first; read again),
        then the log line and the queue's history row. Gates and the controller record every
        transition through here."""
        detail = transition_detail(depth, thresholds, datetime.now(UTC))
        made = self.subscriptions.transition(sub, after.flow_stopped, after.flow_stopped_count, detail)
        if made is None:
            return False
        log.info("queue %r subscription %r flow %s (flowStoppedCount %d): depth %d messages / %d bytes, %s",
                 self.name, sub.name, "STOPPED" if after.flow_stopped else "RESUMED", after.flow_stopped_count,
                 depth.count, depth.size, thresholds)
        self.history.record(made)
        return True

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txnVersion`` committed by ``app_id`` (as of the last refresh), or None."""
        return self._table.transaction_version(app_id)

    def discard_oldest(self, settings: QueueSettings) -> dict[str, int]:
        """Ring policies: move each subscription deeper than the queue's max past its oldest
        messages until it holds exactly the max (Qpid's RING keeps the newest ``maxCount``,
        even of one commit; the newest message is always kept); return the messages discarded
        per subscription."""
        limit = Depth(settings.max_count, settings.max_size)
        if not limit.count and not limit.size:
            return {}
        latest = self._table.version()
        discarded = {}
        for sub, depth in self.backlog(refresh=False):
            position, dropped = sub.acknowledged, 0
            for commit in self.ledger.commits(position.version, latest):
                if not _over(depth, limit):
                    break
                first = position.index if commit.version == position.version + 1 else 0
                last = _fewest_to_drop(commit, first, depth, limit)
                if commit.version == latest:
                    last = min(last, max(first, commit.count - 1))
                gone = commit.part(first, last)
                depth = Depth(depth.count - gone.count, depth.size - gone.size)
                dropped += gone.count
                position = Position(commit.version) if last == commit.count else Position(commit.version - 1, last)
            if position > sub.acknowledged:
                self.acknowledge(sub.name, position, discarded=dropped)
                discarded[sub.name] = dropped
        return discarded

    def purge(self) -> int:
        """Remove the files of the commits every subscription has acknowledged; return the
        messages they held. See :func:`purge_acknowledged`."""
        from deltalake.transaction import CommitProperties, Transaction

        positions = [s.position for s in self.subscriptions.list()]
        self.refresh()
        floor = min(positions, default=-1)
        if floor <= self.earliest_position():
            return 0
        removes, count = self._files_through(floor)
        if not removes:
            return 0
        metadata = json.dumps({METADATA_KEY: {"count": 0, "size": 0, "purgedThrough": floor}})
        properties = CommitProperties(custom_metadata={"userMetadata": metadata},
                                      app_transactions=[Transaction(PURGE_APP_ID, floor)])
        self._table.create_write_transaction(removes, "append", self._table.schema(), commit_properties=properties)
        return count

    def _files_through(self, floor: int) -> tuple[list[Any], int]:
        """``dataChange=false`` removes of the live files that commits up to ``floor`` added
        (a queue only appends, so they are the live files of version ``floor``), and their rows."""
        import time

        import pyarrow as pa
        from deltalake import DeltaTable
        from deltalake.transaction import RemoveAction

        live = {row["path"]: row for row in pa.table(self._table.get_add_actions(flatten=True)).to_pylist()}
        then = DeltaTable(self.path, version=floor, storage_options=self.storage_options or None)
        paths = [p for p in pa.table(then.get_add_actions(flatten=True)).column("path").to_pylist() if p in live]
        now = int(time.time() * 1000)
        removes = [RemoveAction(p, data_change=False, deletion_timestamp=now, size=live[p]["size_bytes"])
                   for p in paths]
        return removes, sum(int(live[p]["num_records"] or 0) for p in paths)

    def read(self, after: Position, upto: Position) -> pa.Table:
        """The messages after position ``after`` up to position ``upto``, with ``_position``
        and ``_enqueue_time`` (the commit's version and time), in enqueue order.

        Inside a commit, messages are in the order of their content (every column): the
        change feed returns a commit's files in no fixed order, and a position indexes the
        commit's messages, so every read of a commit (the next batch's, a replay's, another
        process's) must cut it at the same messages. A commit's messages have no order of their
        own (the producer's write partitioned them) and two equal messages are
        interchangeable, so the content's order is one every reader computes alike."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        schema = self.schema()
        if upto <= after:
            return _message_schema(schema).empty_table()
        changes = pa.table(self._table.load_cdf(starting_version=after.version + 1, ending_version=upto.reached))
        changes = changes.cast(_plain(changes.schema))  # filter and take have no kernels for view types
        changes = changes.filter(pc.equal(changes["_change_type"], "insert"))
        changes = _in_commit_order(changes, schema.names)
        versions = changes["_commit_version"].to_numpy()
        index = np.arange(len(versions)) - np.searchsorted(versions, versions, side="left")  # inside its commit
        keep = ~(((versions == after.version + 1) & (index < after.index))
                 | ((versions == upto.version + 1) & (index >= upto.index)))
        changes = changes.filter(pa.array(keep))
        columns = [changes[name].cast(field.type) for name, field in zip(schema.names, schema, strict=True)]
        columns.append(changes["_commit_version"].cast(pa.int64()))
        columns.append(changes["_commit_timestamp"].cast(pa.timestamp("us", tz="UTC")))
        return pa.Table.from_arrays(columns, schema=_message_schema(schema))


def _plain(schema: pa.Schema) -> pa.Schema:
    """``schema`` with Arrow's view and large string/binary types as the plain ones."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.string(), pa.large_string(): pa.string(),
             pa.binary_view(): pa.binary(), pa.large_binary(): pa.binary()}
    return pa.schema([f.with_type(plain.get(f.type, f.type)) for f in schema])


_REPORTED: set[tuple[str, str, str]] = set()


def _report_difference(settings: QueueSettings, name: str, key: str, raw: Any) -> None:
    """Log, once per process, a conf value that is not applied because the queue records another."""
    if KEYS[name].parse(key, raw) == settings.values[name] or (settings.queue, key, str(raw)) in _REPORTED:
        return
    _REPORTED.add((settings.queue, key, str(raw)))
    log.warning("queue %r: %s=%s (Spark conf) is not applied: the queue's %s is %s (%s), one value for every "
                "process of the queue; to change it: spark-flow set %s %s=%s", settings.queue, key, raw, name,
                settings.values[name], settings.origins[name], settings.queue, name, raw)


def _in_commit_order(changes: pa.Table, names: list[str]) -> pa.Table:
    """``changes`` by commit version, then by message content (see :meth:`Queue.read`). Columns
    Arrow cannot sort (lists, maps) are compared by their values' ``repr``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, columns = [("_commit_version", "ascending")], {"_commit_version": changes["_commit_version"]}
    for i, name in enumerate(names):
        column = changes[name]
        if not _sortable(column.type):
            column = pa.array([repr(v) for v in column.to_pylist()], pa.string())
        columns[f"k{i}"] = column
        keys.append((f"k{i}", "ascending"))
    return changes.take(pc.sort_indices(pa.table(columns), sort_keys=keys))


def _sortable(kind: pa.DataType) -> bool:
    """Whether Arrow's sort takes a column of this type."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return all(_sortable(kind.field(i).type) for i in range(kind.num_fields))
    return not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
                or pa.types.is_map(kind) or pa.types.is_union(kind) or pa.types.is_list_view(kind)
                or pa.types.is_large_list_view(kind))


def _over(depth: Depth, limit: Depth) -> bool:
    return bool((limit.count and depth.count > limit.count) or (limit.size and depth.size > limit.size))


def _fewest_to_drop(commit: Commit, first: int, depth: Depth, limit: Depth) -> int:
    """The end of the fewest of ``commit``'s messages from ``first`` on whose discard brings
    ``depth`` within ``limit`` (the whole commit if even that does not)."""
    def fits(last: int) -> bool:
        gone = commit.part(first, last)
        return not _over(Depth(depth.count - gone.count, depth.size - gone.size), limit)

    return min(bisect.bisect_left(range(first, commit.count + 1), True, key=fits) + first, commit.count)


def _message_schema(schema: pa.Schema) -> pa.Schema:
    import pyarrow as pa

    return schema.append(pa.field("_position", pa.int64(), nullable=False)).append(
        pa.field("_enqueue_time", pa.timestamp("us", tz="UTC"), nullable=False)
    )


_OPEN: dict[tuple[str, tuple[tuple[str, str], ...]], Queue] = {}
_OPEN_LOCK = threading.Lock()


def open_queue(path: str, storage_options: Mapping[str, str] | None = None) -> Queue:
    """A :class:`Queue` for ``path``, shared within the process so its ledger stays warm (one
    handle per path and storage options). Opened outside the lock, so threads open several
    queues at once (the controller's source); a handle opened twice in a race is dropped."""
    key = (normalize_path(path), tuple(sorted((storage_options or {}).items())))
    with _OPEN_LOCK:
        queue = _OPEN.get(key)
    if queue is None:
        queue = Queue(key[0], storage_options)
        with _OPEN_LOCK:
            queue = _OPEN.setdefault(key, queue)
    return queue


def _queue_properties(settings: Mapping[str, Any]) -> dict[str, str]:
    """Declare arguments as ``flow.*`` table properties (``maxCount``, ``flow.maxCount`` and
    ``qpid.max_count`` all become ``flow.maxCount``); only queue settings are declared."""
    return {PROPERTY_PREFIX + queue_setting(key, value): str(value) for key, value in settings.items()}


def _sql_properties(properties: Mapping[str, str]) -> str:
    return ", ".join(f"{spark_sql_string(k)} = {spark_sql_string(v)}" for k, v in properties.items())


def declare(
    spark: SparkSession,
    queue: str,
    schema: StructType | str | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    state_location: str | None = None,
) -> Queue:
    """Declare a queue: create the Delta table (or adopt an existing one) and its subscriptions.

    Parameters
    ----------
    spark : SparkSession
    queue : str
        A path (anything with ``/`` or a scheme: ``s3a://b/q``, ``./q``) or a catalog table
        name (see :mod:`spark_flow.names`).
    schema : StructType or DDL string, optional
        The messages' columns. Required to create a queue; checked against an existing one.
    settings : mapping, optional
        Queue settings (limits, policy), by setting name (``maxCount``), table property
        (``flow.maxCount``) or Qpid argument (``qpid.max_count``). Stored as ``flow.*`` table
        properties; declaring an existing queue again updates them. Queue settings the session's
        Spark conf gives (``spark.flow.stopCount``, ``spark.flow.queues.<pattern>.<key>``) are
        recorded too where the queue has none: every process then judges the queue with them.
    state_location : str, optional
        Where the queue's subscriptions live. Default: ``spark.flow.home``/<queue name> if that
        conf is set, else ``_flow`` inside the table's directory (Delta ignores ``_`` folders).
        With ``spark.flow.home`` set, the queue is also registered there, for the controller
        and the ``spark-flow`` CLI, and recorded as the home's (``flow.home``): the home's
        limits (``spark.flow.homeStopCount``, ..., recorded with the home where it has none)
        hold its producers too.

    Returns
    -------
    Queue
        A handle; a new queue has a ``default`` subscription at the earliest position, and an
        existing one keeps its subscriptions as they are.

    Examples
    --------
    >>> q = declare(spark, "/data/queues/events", "id BIGINT, body STRING",
    ...             settings={"maxCount": 1000, "stopCount": 900, "resumeCount": 500})
    """
    from pyspark.sql.types import StructType

    ref = queue_ref(queue)
    properties = _queue_properties(settings or {})
    conf = session_flow_conf(spark)
    storage = session_storage_options(spark)
    given = {key: raw for key, raw in conf_settings(ref.name, conf, "queue").values()}
    wanted = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    detail = _detail(spark, ref)
    at = _state_location(state_location, conf, ref.name)
    home = normalize_path(conf[HOME_CONF]) if conf.get(HOME_CONF) else None
    if home:
        from spark_flow.homeflow import open_home  # homeflow imports this module

        open_home(home, storage).record_conf(conf)  # a bad home limit fails before the queue is made
    if detail is not None:
        location = _adopt(spark, ref, detail, wanted, properties, given, at, storage, home)
    else:
        location = _create(spark, ref, wanted, properties, given, at, home)
    handle = Queue(location, storage)
    if handle.subscriptions.create_table():  # a new queue; a declared one keeps its subscriptions
        handle.subscriptions.create(DEFAULT_SUBSCRIPTION, -1)
    handle.record_conf(conf)
    if home:
        Registry(home, storage).register(handle.name, handle.path)
    with _OPEN_LOCK:
        for key in [key for key in _OPEN if key[0] == handle.path]:
            del _OPEN[key]
    return handle


def _adopt(spark: SparkSession, ref: QueueRef, detail: Mapping[str, Any], wanted: StructType | None,
           properties: dict[str, str], given: Mapping[str, Any], state_location: Callable[[str], str],
           storage: Mapping[str, str], home: str | None) -> str:
    """Declare an existing Delta table a queue (again): its columns must be the declared ones;
    the settings given are recorded, and the conf's where the queue has none. Returns its location."""
    existing = spark.table(ref.sql).schema
    if wanted is not None and _columns(existing) != _columns(wanted):
        raise SchemaMismatchError(ref.name, existing.simpleString(), wanted.simpleString(),
                                  "the existing table's columns differ from the declared schema")
    has, location = detail["properties"], normalize_path(detail["location"])
    state = has.get(STATE_LOCATION) or state_location(location)
    runtime = OverrideTable(posixpath.join(state, "overrides"), storage).settings()
    recorded = {setting_name(k) for k in [*has, *properties, *runtime] if is_setting(k)}
    missing = {key: raw for key, raw in given.items() if setting_name(key) not in recorded}
    queue_settings(ref.name, has, missing, properties, runtime)  # the whole as it will be, before any write
    properties.setdefault(QUEUE_NAME, has.get(QUEUE_NAME, ref.name))
    properties.setdefault(STATE_LOCATION, state)
    if home:
        properties.setdefault(HOME_PROPERTY, home)
    properties["delta.enableChangeDataFeed"] = "true"
    if any(has.get(k) != v for k, v in properties.items()):
        spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({_sql_properties(properties)})")
    return location


def _create(spark: SparkSession, ref: QueueRef, wanted: StructType | None, properties: dict[str, str],
            given: Mapping[str, Any], state_location: Callable[[str], str], home: str | None) -> str:
    """Create a queue: a Delta table with Change Data Feed on and its settings as properties
    (the given ones over the conf's). Returns its location."""
    if wanted is None:
        raise QueueNotFoundError(ref.name, "it does not exist yet, and a schema is needed to create it")
    queue_settings(ref.name, given, properties)  # every bad value fails before any write
    created = {"delta.enableChangeDataFeed": "true", QUEUE_NAME: ref.name, **({HOME_PROPERTY: home} if home else {}),
               **_queue_properties(given), **properties}
    spark.sql(f"CREATE TABLE IF NOT EXISTS {ref.sql} ({wanted.toDDL()}) USING delta "
              f"TBLPROPERTIES ({_sql_properties(created)})")
    detail = _detail(spark, ref)
    if detail is None:  # IF NOT EXISTS took the files at the path for a table
        raise QueueNotFoundError(str(ref.path), "the path holds files that are not a Delta table; "
                                                "declare a queue on an empty path or on a Delta table")
    location = normalize_path(detail["location"])
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({_sql_properties({STATE_LOCATION: state_location(location)})})")
    return location


def _state_location(given: str | None, conf: Mapping[str, str], name: str) -> Callable[[str], str]:
    """Where a queue at a location keeps its state: ``state_location`` as given, else
    ``<home>/<name>`` with a home, else ``_flow`` inside the table's directory."""
    def at(location: str) -> str:
        if given:
            return normalize_path(given)
        if conf.get(HOME_CONF):
            return posixpath.join(normalize_path(conf[HOME_CONF]), name)
        return posixpath.join(location, "_flow")

    return at


def _columns(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _detail(spark: SparkSession, ref: QueueRef) -> dict[str, Any] | None:
    """Delta's ``DESCRIBE DETAIL`` of the queue's table (its location and properties), None if
    there is no Delta table there. SQL, so it is the same with a classic and a Connect session."""
    from pyspark.errors import AnalysisException

    if ref.table is not None and not spark.catalog.tableExists(ref.table):
        return None
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {ref.sql}").first().asDict()
    except AnalysisException as error:
        if "DELTA_MISSING_DELTA_TABLE" in str(error.getCondition()):
            return None
        raise
    if detail["format"] != "delta":
        raise QueueNotFoundError(ref.name, f"table {ref.sql} is a {detail['format']} table, not a Delta table")
    return detail


def queue_location(spark: SparkSession, queue: str) -> str:
    """The storage location of a queue given by path or catalog name."""
    ref = queue_ref(queue)
    if ref.path:
        return ref.path
    detail = _detail(spark, ref)
    if detail is None:
        raise QueueNotFoundError(queue, "no such table in the catalog")
    return normalize_path(detail["location"])


def purge_acknowledged(spark: SparkSession, queue: str) -> int:
    """Delete the messages every subscription has acknowledged; return how many.

    A queue only appends, each commit in files of its own, and the ``flowqueue`` source reads a
    commit's messages from those files (the change feed). So a purge removes exactly the files
    the commits up to the lowest ack position added, in one ``dataChange=false`` commit of
    removes only: the change feed and streaming readers skip it, it counts nothing in the depth,
    and the files of every commit a subscription still needs stay in the table, so ``VACUUM``
    (which deletes the removed files) never takes a message that is still to be read. The floor
    is recorded as the commit's transaction (``txnAppId`` :data:`PURGE_APP_ID`): where
    ``earliest`` starts. A producer appending meanwhile is not in conflict with it.
    """
    handle = open_queue(queue_location(spark, queue), session_storage_options(spark))
    return retry_commit(handle.purge)
