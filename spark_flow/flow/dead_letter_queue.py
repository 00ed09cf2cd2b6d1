"""Dead-letter queues: where a queue's poison messages go, and how they go back.

A dead-letter queue is a spark-flow queue like any other (readable with ``flowqueue``, its
depth in the status, inspectable with deltalake or SQL): the origin's columns, then where each
message came from and why it is here (RabbitMQ's ``x-death`` header, Pulsar's dead-letter topic
properties, as columns):

``_origin_queue``, ``_origin_subscription``, ``_origin_position`` (the origin commit),
``_origin_index`` (the message's index in it), ``_origin_enqueue_time``, ``_error`` (the last
failure, one line), ``_deliveries`` (how often it was delivered alone and failed),
``_dead_lettered_at``.

It has no flow control (dead letters must never hold a consumer) and is declared at the first
dead letter, registered in the origin's home. :func:`replay` appends what it holds back into the
origin queue, once (a deltalake commit with its own transaction), through its ``replay``
subscription, so replaying twice replays nothing twice.

A dead-letter queue is checked where it is named (``declare``, ``set``, a process's Spark conf),
not at the first dead letter, when the consumer needs it: not the queue itself, not a queue
whose dead letters lead back to it (RabbitMQ's dead-letter cycles), and, where it exists
already, with exactly the queue's columns then the dead-letter columns, as the consumer's
``declare`` of it checks (:func:`check_dead_letter_queue`).
"""

from __future__ import annotations

import functools
import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import DeadLetterQueueError, QueueNotFoundError
from spark_flow.flow.queue import CATALOG_TABLE, Queue, open_queue
from spark_flow.records.home import Registry
from spark_flow.rules.depth import METADATA_KEY, Position
from spark_flow.rules.names import normalize_path, queue_ref
from spark_flow.store.table import is_table, open_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from spark_flow.rules.settings import QueueSettings

#: The columns a dead letter carries after its origin's, as DDL.
ORIGIN_COLUMNS = ("_origin_queue STRING, _origin_subscription STRING, _origin_position BIGINT, _origin_index BIGINT, "
                  "_origin_enqueue_time TIMESTAMP, _error STRING, _deliveries BIGINT, _dead_lettered_at TIMESTAMP")
#: The subscription of a dead-letter queue that :func:`replay` moves.
REPLAY_SUBSCRIPTION = "replay"
#: A dead-letter queue's name and location, by default: its origin's, with this suffix.
SUFFIX = "_dlq"
#: The setting that names a queue's dead-letter queue.
KEY = "deadLetterQueue"
#: Dead-letter queues followed from a queue when looking for a way back to it.
CHAIN_LIMIT = 100

#: Where a ``deadLetterQueue`` value is: a path as it is, a catalog name where it is known
#: (None where it is not: a table not made yet, or out of reach without Spark).
Locate = Callable[[str], str | None]


def dead_letter_queue(origin: Queue, settings: QueueSettings) -> str:
    """Where ``origin``'s dead letters go: its ``deadLetterQueue`` setting (a path or a catalog
    name), else beside it, named as it was declared: ``<origin path or name>_dlq`` (a queue
    declared as ``flow.events`` has ``flow.events_dlq``, its state tables named alike, not after
    the catalog's full name of the origin's table)."""
    return settings.dead_letter_queue or (catalog_name(origin) or origin.path.rstrip("/")) + SUFFIX


@dataclass(frozen=True)
class Origin:
    """The queue whose dead-letter queue is named: its name, location (None for a catalog table
    not created yet, then ``table`` names it) and columns."""

    name: str
    location: str | None
    columns: StructType
    table: str | None = None

    @classmethod
    def of(cls, queue: Queue) -> Origin:
        """A declared queue (a catalog table's is named as declared: its queue name)."""
        return cls(queue.name, queue.path, queue.spark_schema(), catalog_name(queue))


def catalog_name(queue: Queue) -> str | None:
    """The catalog name a queue was declared by, None for a path's."""
    return queue.name if CATALOG_TABLE in queue.properties() else None


def check_dead_letter_queue(settings: QueueSettings, origin: Origin, locate: Locate,
                            storage_options: Mapping[str, str]) -> None:
    """Refuse ``settings``' ``deadLetterQueue`` for ``origin``, before anything is written, when
    it could not take the queue's dead letters: the queue itself, a cycle of dead-letter queues,
    an existing table with other columns than the queue's then :data:`ORIGIN_COLUMNS`."""
    value = settings.dead_letter_queue
    if value is None:
        return
    looked_up: Locate = functools.cache(locate)  # a catalog name is looked up once
    key, location = settings.origins[KEY], _located(looked_up, value)
    if names_itself(value, origin.location, origin.table, looked_up):
        raise DeadLetterQueueError(key, value, origin.name, f"a queue other than {origin.name!r} itself",
                                   f"Its dead letters carry the dead-letter columns ({_extra_names()}), "
                                   "which it has not")
    cycle = _cycle(value, origin, looked_up, storage_options)
    if cycle:
        raise DeadLetterQueueError(key, value, origin.name, f"a queue whose dead letters do not lead back to "
                                   f"{origin.name!r}", "Dead letters would go round: " + " -> ".join(cycle))
    if location is not None and is_table(location, storage_options):
        wanted, has = dead_letter_schema(origin.columns), _schema_at(location, storage_options)
        if _columns(has) != _columns(wanted):
            raise DeadLetterQueueError(key, value, origin.name, f"a new queue, or one with the columns of "
                                       f"{origin.name!r} then the dead-letter columns: <{wanted.simpleString()}>",
                                       f"The table there has <{has.simpleString()}>")


def names_itself(value: str, location: str | None, table: str | None, locate: Locate) -> bool:
    """Whether a ``deadLetterQueue`` value names the queue at ``location`` (or the catalog
    table ``table``, not created yet) itself."""
    if table is not None and queue_ref(value).table == table:
        return True
    found = _located(locate, value)
    return found is not None and found == _plain(location)


def conf_for_queue(given: Mapping[str, tuple[str, Any]], location: str | None, table: str | None,
                   locate: Locate) -> dict[str, tuple[str, Any]]:
    """A Spark conf's settings for a queue (:func:`~spark_flow.rules.keys.conf_settings`) without
    a ``deadLetterQueue`` that names that queue: a conf key covers many queues
    (``spark.flow.deadLetterQueue`` every one), the dead-letter queue it names among them, which
    keeps its default instead of taking its own dead letters."""
    entry = given.get(KEY)
    if entry is not None and names_itself(str(entry[1]).strip(), location, table, locate):
        return {name: setting for name, setting in given.items() if name != KEY}
    return dict(given)


def registered(home: str | None, storage_options: Mapping[str, str]) -> Locate:
    """Where a ``deadLetterQueue`` value is without Spark: a path as it is, a catalog name as
    the home registers it (a dead-letter queue is registered in its origin's home)."""
    def locate(value: str) -> str | None:
        ref = queue_ref(value)
        if ref.path is not None:
            return ref.path
        return Registry(home, storage_options).queues().get(value) if home else None

    return locate


def _cycle(value: str, origin: Origin, locate: Locate, storage_options: Mapping[str, str]) -> list[str]:
    """The queues dead letters go through from ``origin`` back to it (``a -> b -> a``), following
    each existing queue's dead-letter queue (named or its default); empty if they do not return."""
    names, seen = [origin.name], set[str]()
    while len(seen) < CHAIN_LIMIT:
        if names_itself(value, origin.location, origin.table, locate):
            return [*names, origin.name]
        location = _located(locate, value)
        if location is None or location in seen:
            return []
        queue = _declared(location, storage_options)
        if queue is None:
            return []
        seen.add(location)
        names.append(queue.name)
        value = dead_letter_queue(queue, queue.settings())
    return []


def _declared(location: str, storage_options: Mapping[str, str]) -> Queue | None:
    """The queue declared at ``location``, as it is now; None if there is none."""
    try:
        queue = open_queue(location, storage_options)
        queue.refresh()
    except QueueNotFoundError:
        return None
    return queue


def _located(locate: Locate, value: str) -> str | None:
    location = locate(value)
    return _plain(location) if location is not None else None


def _plain(location: str | None) -> str | None:
    return normalize_path(location).rstrip("/") if location is not None else None


def _schema_at(location: str, storage_options: Mapping[str, str]) -> StructType:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(open_table(location, storage_options).schema_json()))


def _columns(schema: StructType) -> list[tuple[str, str]]:
    """Columns as ``declare`` compares them: names and types, in order."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _extra_names() -> str:
    return ", ".join(column.split()[0] for column in ORIGIN_COLUMNS.split(", "))


def dead_letter_schema(origin: StructType) -> StructType:
    """A dead-letter queue's columns: the origin's, then where each message came from and why.
    Built without Spark's DDL parser, which needs a session: ``set`` checks them without one."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    types = {"STRING": StringType(), "BIGINT": LongType(), "TIMESTAMP": TimestampType()}
    extra = [StructField(name, types[kind]) for name, kind in (column.split() for column in ORIGIN_COLUMNS.split(", "))]
    return StructType([*origin.fields, *extra])


def dead_letter_rows(message: DataFrame, origin: Queue, subscription: str, index: int, deliveries: int,
                     error: str) -> pa.Table:
    """One dead letter, as Arrow rows of its dead-letter queue: ``message`` is one row of a
    ``flowqueue`` batch (the origin's columns, ``_position``, ``_enqueue_time``)."""
    import pyarrow as pa

    row = message.toArrow()
    columns = [row.column(name) for name in origin.schema().names]
    extra = {"_origin_queue": pa.array([origin.name]), "_origin_subscription": pa.array([subscription]),
             "_origin_position": row.column("_position").cast(pa.int64()), "_origin_index": pa.array([index], pa.int64()),
             "_origin_enqueue_time": row.column("_enqueue_time").cast(pa.timestamp("us", tz="UTC")),
             "_error": pa.array([error]), "_deliveries": pa.array([deliveries], pa.int64()),
             "_dead_lettered_at": pa.array([datetime.now(UTC)], pa.timestamp("us", tz="UTC"))}
    return pa.Table.from_arrays([*columns, *extra.values()], names=[*origin.schema().names, *extra])


def replay(dead_letters: Queue, origin: Queue) -> int:
    """Append every message of ``dead_letters`` not replayed yet into ``origin``, as the origin's
    columns, in one commit (the ledger counts it as a producer's); return how many."""
    import pyarrow as pa

    sub = dead_letters.create_subscription(REPLAY_SUBSCRIPTION, "earliest")
    latest = dead_letters.refresh()
    if latest <= sub.position:
        return 0
    messages = dead_letters.read(sub.acknowledged, Position(latest))
    schema = origin.schema()
    rows = pa.Table.from_arrays([messages.column(name).cast(field.type) for name, field in zip(schema.names, schema,
                                                                                                strict=True)],
                                schema=schema)
    size = dead_letters.ledger.depth(sub.acknowledged, latest).size
    append_once(origin, rows, size, f"spark-flow/replay/{dead_letters.path}", latest)
    dead_letters.acknowledge(REPLAY_SUBSCRIPTION, latest)
    return int(rows.num_rows)


def append_once(queue: Queue, rows: pa.Table, size: int, app_id: str, version: int) -> None:
    """Append ``rows`` (``size`` bytes as the queue counts them) to ``queue`` as one commit with
    the sink's ``userMetadata`` (so the ledger counts them) and the transaction (``app_id``,
    ``version``), unless that transaction is in already: a replayed step writes nothing twice."""
    metadata: dict[str, Any] = {METADATA_KEY: {"count": rows.num_rows, "size": int(size), "producer": app_id}}
    queue.append_once(rows, json.dumps(metadata), (app_id, version))


def dead_letter_app_id(origin: Queue, subscription: str) -> str:
    """The transaction of a subscription's dead letters: one per origin and subscription."""
    return posixpath.join("spark-flow/dead-letters", origin.name, subscription)
