"""Declaring a queue (Spark DDL, its state location, its home), finding where a queue lives, and
purging what every subscription has acknowledged.

Declaring needs Spark: a queue may be a catalog table, and tables are made with SQL (``CREATE
TABLE ... USING delta``, ``DESCRIBE DETAIL``, ``ALTER TABLE``), the same with a classic and a
Spark Connect session. Everything after (the handle, the depth, the acks) reads the queue with
``deltalake`` (:mod:`spark_flow.flow.queue`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import ConfigurationError, QueueNotFoundError, SchemaMismatchError
from spark_flow.flow.conf_record import record_home_conf, record_queue_conf
from spark_flow.flow.dead_letter_queue import KEY as DEAD_LETTER_QUEUE
from spark_flow.flow.dead_letter_queue import Locate, Origin, check_dead_letter_queue, conf_for_queue
from spark_flow.flow.homeflow import open_home
from spark_flow.flow.queue import (
    CATALOG_TABLE,
    HOME_PROPERTY,
    PURGE_APP_ID,
    QUEUE_NAME,
    STATE_LOCATION,
    Queue,
    open_queue,
)
from spark_flow.records.home import HOME_CONF, Registry
from spark_flow.records.runtime_settings import RUNTIME_SETTINGS_FOLDER, RuntimeSettings
from spark_flow.records.subscriptions import DEFAULT_SUBSCRIPTION
from spark_flow.rules.depth import METADATA_KEY
from spark_flow.rules.keys import PROPERTY_PREFIX, conf_settings, is_setting, queue_setting, setting_name
from spark_flow.rules.names import QueueRef, home_member, is_path, normalize_path, queue_ref, state_member
from spark_flow.rules.settings import queue_settings
from spark_flow.spark.session import session_flow_conf, session_storage_options
from spark_flow.store.access import check_access
from spark_flow.store.engine import made_elsewhere, purge_refused
from spark_flow.store.engine_sql import spark_sql_string
from spark_flow.store.handles import forget
from spark_flow.store.io import uses_engine
from spark_flow.store.table import retry_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


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
        name (see :mod:`spark_flow.rules.names`).
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
    ref = queue_ref(queue)
    properties = _queue_properties(settings or {})
    conf = session_flow_conf(spark)
    storage = session_storage_options(spark)
    locate = _locator(spark, storage)
    given = {key: raw for key, raw in conf_for_queue(conf_settings(ref.name, conf, "queue"), ref.path, ref.table,
                                                     locate).values()}
    wanted = _columns_of(schema)
    at = _state_location(state_location, conf, ref.name)
    home = normalize_path(conf[HOME_CONF]) if conf.get(HOME_CONF) else None
    for location in (home, state_location):  # reached before Spark creates anything
        if location:
            _check_location(spark, location, storage, schema=location == home)
    if home and not state_location:
        _check_state_unshared(home, ref.name, storage)
    detail = _detail(spark, ref, storage)  # a path's look is its access check too
    if home:
        record_home_conf(open_home(home, storage), conf)  # a bad home limit fails before the queue is made
    if detail is not None:
        location = _adopt(spark, ref, detail, wanted, properties, given, at, storage, home, locate)
    else:
        location = _create(spark, ref, wanted, properties, given, at, storage, home, locate)
    handle = Queue(location, storage)
    if handle.subscriptions.create_table():  # a new queue; a declared one keeps its subscriptions
        handle.subscriptions.create(DEFAULT_SUBSCRIPTION, -1)
    record_queue_conf(handle, conf)
    if home:
        Registry(home, storage).register(handle.name, handle.path)
    forget("queue", handle.path)  # handles opened before hold the properties it had
    return handle


def _adopt(spark: SparkSession, ref: QueueRef, detail: Mapping[str, Any], wanted: StructType | None,
           properties: dict[str, str], given: Mapping[str, Any], state_location: Callable[[str], str],
           storage: Mapping[str, str], home: str | None, locate: Locate) -> str:
    """Declare an existing Delta table a queue (again): its columns must be the declared ones;
    the settings given are recorded, and the conf's where the queue has none; a dead-letter
    queue they name is checked. Returns its location."""
    existing = spark.table(ref.sql).schema
    if wanted is not None and _columns(existing) != _columns(wanted):
        raise SchemaMismatchError(ref.name, existing.simpleString(), wanted.simpleString(),
                                  "the existing table's columns differ from the declared schema")
    has, location = detail["properties"], _location(detail, storage)
    state = has.get(STATE_LOCATION) or state_location(location)
    runtime = RuntimeSettings(state_member(state, RUNTIME_SETTINGS_FOLDER), storage).current()
    recorded = {setting_name(k) for k in [*has, *properties, *runtime] if is_setting(k)}
    missing = {key: raw for key, raw in given.items() if setting_name(key) not in recorded}
    settings = queue_settings(ref.name, has, missing, properties, runtime)  # the whole as it will be, before any write
    if settings.origins[DEAD_LETTER_QUEUE] in {*properties, *missing}:  # named here
        check_dead_letter_queue(settings, Origin(ref.name, location, existing, ref.table), locate, storage)
    properties.setdefault(QUEUE_NAME, has.get(QUEUE_NAME, ref.name))
    properties.setdefault(STATE_LOCATION, state)
    if ref.table is not None:
        properties.setdefault(CATALOG_TABLE, detail["name"])
    if home:
        properties.setdefault(HOME_PROPERTY, home)
    properties["delta.enableChangeDataFeed"] = "true"
    if any(has.get(k) != v for k, v in properties.items()):
        _alter(spark, ref, properties)
    return location


def _create(spark: SparkSession, ref: QueueRef, wanted: StructType | None, properties: dict[str, str],
            given: Mapping[str, Any], state_location: Callable[[str], str], storage: Mapping[str, str],
            home: str | None, locate: Locate) -> str:
    """Create a queue: a Delta table with Change Data Feed on and its settings as properties
    (the given ones over the conf's), its dead-letter queue checked. Returns its location: a
    path queue's is its path, as :func:`queue_location` gives it to every process; a catalog
    table's, :func:`_location`'s."""
    if wanted is None:
        raise QueueNotFoundError(ref.name, "it does not exist yet, and a schema is needed to create it")
    settings = queue_settings(ref.name, given, properties)  # every bad value fails before any write
    check_dead_letter_queue(settings, Origin(ref.name, ref.path, wanted, ref.table), locate, storage)
    created = {"delta.enableChangeDataFeed": "true", QUEUE_NAME: ref.name, **({HOME_PROPERTY: home} if home else {}),
               **_queue_properties(given), **properties}
    spark.sql(f"CREATE TABLE IF NOT EXISTS {ref.sql} ({wanted.toDDL()}) USING delta "
              f"TBLPROPERTIES ({_sql_properties(created)})")
    if ref.path is not None:  # no DESCRIBE DETAIL: half the time of declaring a new queue
        made_elsewhere(normalize_path(ref.path))
        if not check_access(ref.path, storage):  # IF NOT EXISTS took the files at the path for a table
            raise QueueNotFoundError(ref.path, "the path holds files that are not a Delta table; "
                                               "declare a queue on an empty path or on a Delta table")
        location, recorded = ref.path, {STATE_LOCATION: state_location(ref.path)}
    else:
        detail = _detail(spark, ref, storage)
        if detail is None:
            raise QueueNotFoundError(ref.name, f"table {ref.sql} was dropped while it was declared")
        location = _location(detail, storage)
        recorded = {STATE_LOCATION: state_location(location), CATALOG_TABLE: detail["name"]}
    _alter(spark, ref, recorded)
    return location


def _alter(spark: SparkSession, ref: QueueRef, properties: Mapping[str, str]) -> None:
    """Set the queue's ``properties``; the handles on it in this process see them at their next look."""
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({_sql_properties(properties)})")
    made_elsewhere(normalize_path(ref.path) if ref.path is not None else str(ref.table))


def _check_location(spark: SparkSession, location: str, storage: Mapping[str, str], *, schema: bool) -> None:
    """Raise, naming it, where the queue's state cannot go: a path this process cannot reach, or
    a schema not in the catalog (the home's, or a catalog state location's)."""
    if is_path(location):
        check_access(location, storage)
        return
    named = location if schema else location.rpartition(".")[0]
    if not named or not spark.catalog.databaseExists(named):
        key = HOME_CONF if schema else "state_location"
        raise ConfigurationError(key, location, f"a path, or {'a schema' if schema else 'a table name in a schema'} "
                                 f"in the catalog (CREATE SCHEMA {named or '<schema>'} first)")


def _check_state_unshared(home: str, name: str, storage: Mapping[str, str]) -> None:
    """Refuse a queue whose state its home would keep where it keeps another queue's: a schema
    home names a queue's state tables after the queue, any character but a letter, a digit or
    ``_`` made ``_`` (``a.b`` and ``a_b`` would share ``<schema>.a_b_subscriptions``)."""
    state = home_member(home, name)
    shared = next((other for other in Registry(home, storage).queues() if other != name
                   and home_member(home, other) == state), None)
    if shared is not None:
        raise ConfigurationError("queue", name, f"a name whose state tables in home {home} ({state}_*) are not "
                                 f"queue {shared!r}'s: name it apart in a letter, digit or _, or give it a "
                                 "state_location")


def _state_location(given: str | None, conf: Mapping[str, str], name: str) -> Callable[[str], str]:
    """Where a queue at a location keeps its state: ``state_location`` as given, else
    ``<home>/<name>`` with a home (``<schema>.<name>_*`` tables in a schema home), else ``_flow``
    inside the table's directory (``<table>__flow_*`` tables beside a catalog name's)."""
    def at(location: str) -> str:
        if given:
            return normalize_path(given)
        if conf.get(HOME_CONF):
            return home_member(normalize_path(conf[HOME_CONF]), name)
        return state_member(location, "_flow")

    return at


def _locator(spark: SparkSession, storage: Mapping[str, str]) -> Locate:
    """Where a ``deadLetterQueue`` value is, as this session sees it: a path as it is, a catalog
    name where the catalog has its table (None: not made yet)."""
    def locate(value: str) -> str | None:
        ref = queue_ref(value)
        if ref.path is not None:
            return ref.path
        detail = _detail(spark, ref, storage)
        return _location(detail, storage) if detail is not None else None

    return locate


def _columns_of(schema: StructType | str | None) -> StructType | None:
    """The declared columns: a schema, or its DDL (``id BIGINT, body STRING``)."""
    from pyspark.sql.types import StructType

    if not isinstance(schema, str):
        return schema
    parsed = StructType.fromDDL(schema)
    if not isinstance(parsed, StructType):
        raise ConfigurationError("schema", schema, "the messages' columns as DDL, e.g. 'id BIGINT, body STRING'")
    return parsed


def _columns(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _detail(spark: SparkSession, ref: QueueRef, storage: Mapping[str, str]) -> dict[str, Any] | None:
    """Delta's ``DESCRIBE DETAIL`` of the queue's table (its location and properties), None if
    there is no Delta table there (for a path, told by :func:`check_access`'s ``deltalake``
    look: no Spark job). SQL, so it is the same with a classic and a Connect session."""
    from pyspark.errors import AnalysisException

    if ref.table is not None and not spark.catalog.tableExists(ref.table):
        return None
    if ref.path is not None and not check_access(ref.path, storage):
        return None
    try:
        row = spark.sql(f"DESCRIBE DETAIL {ref.sql}").first()
    except AnalysisException as error:
        if "DELTA_MISSING_DELTA_TABLE" in str(error.getCondition()):
            return None
        raise
    if row is None:
        return None
    detail = row.asDict()
    if detail["format"] != "delta":
        raise QueueNotFoundError(ref.name, f"table {ref.sql} is a {detail['format']} table, not a Delta table")
    return detail


def queue_location(spark: SparkSession, queue: str) -> str:
    """The storage location of a queue given by path or catalog name."""
    ref = queue_ref(queue)
    if ref.path:
        return ref.path
    storage = session_storage_options(spark)
    detail = _detail(spark, ref, storage)
    if detail is None:
        raise QueueNotFoundError(queue, "no such table in the catalog")
    return _location(detail, storage)


def _location(detail: Mapping[str, Any], storage: Mapping[str, str]) -> str:
    """Where every process opens a catalog table's queue: its storage location where this
    process reads it with deltalake, else its name (a managed table's storage is the engine's
    alone on governed compute)."""
    location = normalize_path(detail["location"])
    return str(detail["name"]) if uses_engine(location, storage) else location


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
    location, storage = queue_location(spark, queue), session_storage_options(spark)
    if uses_engine(location, storage):
        raise purge_refused()
    handle = open_queue(location, storage)
    return retry_commit(lambda: purge(handle))


def purge(queue: Queue) -> int:
    """Remove the files of the commits every subscription of ``queue`` has acknowledged; return
    the messages they held. See :func:`purge_acknowledged`."""
    positions = [s.position for s in queue.subscriptions.list()]
    queue.refresh()
    floor = min(positions, default=-1)
    if floor <= queue.earliest_position():
        return 0
    # a queue only appends, so the files commits up to ``floor`` added are the live files of that version
    live, then = queue.live_files(), queue.live_files(floor)
    removed = {path: live[path] for path in then if path in live}
    if not removed:
        return 0
    metadata = json.dumps({METADATA_KEY: {"count": 0, "size": 0, "purgedThrough": floor}})
    queue.remove_files({path: size for path, (size, _rows) in removed.items()}, (PURGE_APP_ID, floor), metadata)
    return sum(rows for _size, rows in removed.values())
