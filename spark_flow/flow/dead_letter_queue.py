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
"""

from __future__ import annotations

import json
import posixpath
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_flow.rules.depth import METADATA_KEY, Position

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from spark_flow.flow.queue import Queue
    from spark_flow.rules.settings import QueueSettings

#: The columns a dead letter carries after its origin's, as DDL.
ORIGIN_COLUMNS = ("_origin_queue STRING, _origin_subscription STRING, _origin_position BIGINT, _origin_index BIGINT, "
                  "_origin_enqueue_time TIMESTAMP, _error STRING, _deliveries BIGINT, _dead_lettered_at TIMESTAMP")
#: The subscription of a dead-letter queue that :func:`replay` moves.
REPLAY_SUBSCRIPTION = "replay"
#: A dead-letter queue's name and location, by default: its origin's, with this suffix.
SUFFIX = "_dlq"


def dead_letter_queue(origin: Queue, settings: QueueSettings) -> str:
    """Where ``origin``'s dead letters go: its ``deadLetterQueue`` setting (a path or a catalog
    name), else beside it: ``<origin path>_dlq``."""
    return settings.dead_letter_queue or origin.path.rstrip("/") + SUFFIX


def dead_letter_schema(origin: StructType) -> StructType:
    """A dead-letter queue's columns: the origin's, then where each message came from and why."""
    from pyspark.sql.types import StructType

    extra = StructType.fromDDL(ORIGIN_COLUMNS)
    assert isinstance(extra, StructType)  # DDL of columns
    return StructType([*origin.fields, *extra.fields])


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
