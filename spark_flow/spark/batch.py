"""A micro-batch as the sink handles it: its context (transaction, query, time held) and its rows,
conformed to a queue's columns, sized, ordered and counted.

Exactly once: each commit carries ``txnAppId`` (the query id) and ``txnVersion`` =
``batchId * 2**32 + rows written so far`` (:meth:`BatchContext.txn_version`), so after a crash
the replayed batch learns from the queue's log how many of its rows are in, skips them and
writes the rest. Its rows are put in a content-determined order first (:func:`order_key`), so a
replay cuts the same chunks.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import SchemaMismatchError
from spark_flow.rules.depth import METADATA_KEY

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import DataType, StructType

TXN_SPAN = 2**32
_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


@dataclass
class BatchContext:
    """One micro-batch being enqueued: its transaction (``app_id``, ``batch_id``), the query
    running it (None outside a streaming query), whether that query still runs, and the seconds
    the batch was held (flow control) and throttled (publish rate) so far per queue path, before
    and between its writes."""

    app_id: str
    batch_id: int
    query: StreamingQuery | None
    is_active: Callable[[], bool]
    held: dict[str, float] = field(default_factory=dict)
    throttled: dict[str, float] = field(default_factory=dict)

    @property
    def query_id(self) -> str | None:
        return str(self.query.id) if self.query is not None else None

    def txn_version(self, written: int) -> int:
        """The ``txnVersion`` of a commit that brings the batch's messages written to ``written``."""
        return self.batch_id * TXN_SPAN + written

    def written(self, last_txn_version: int | None) -> int:
        """How many of the batch's messages an earlier run wrote, from the last ``txnVersion``
        of this ``app_id`` in the queue's log (a replay after a crash)."""
        base = self.txn_version(0)
        return last_txn_version - base if last_txn_version is not None and last_txn_version >= base else 0

    def commit_metadata(self, path: str, count: int, size: int, weight: int = 1) -> str:
        """A commit's ``userMetadata``: its messages and bytes (the ledger's depth), the
        producer and its ``pacingWeight`` (its share of a paced queue's rate, as every other
        producer's look reads it), and the query, batch and seconds held and throttled so far (a
        query listener's report, in whatever process)."""
        return json.dumps({METADATA_KEY: {"count": int(count), "size": int(size), "producer": self.app_id,
                                          "weight": int(weight),
                                          "batch": self.batch_id, "query": self.query_id,
                                          "held": round(self.held.get(path, 0.0), 3),
                                          "throttled": round(self.throttled.get(path, 0.0), 3)}})


def message_size(schema: StructType, size_column: str | None = None) -> Column:
    """The content size of a message in bytes, per row.

    With ``size_column``, that column's value. Otherwise the sum over the columns of: the UTF-8
    bytes of strings and the bytes of binaries, the JSON bytes of structs, arrays and maps, and
    the fixed width of other types (Spark's ``defaultSize``: 8 for a long or a timestamp, 4 for
    an int, 8 otherwise); nulls count 0.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

    if size_column is not None:
        return F.coalesce(F.col(size_column).cast("long"), F.lit(0))
    terms = []
    for column_field in schema.fields:
        column, kind = F.col(f"`{column_field.name}`"), column_field.dataType
        if isinstance(kind, (StringType, BinaryType)):
            term = F.octet_length(column)
        elif isinstance(kind, (StructType, ArrayType, MapType)):
            term = F.octet_length(F.to_json(column))
        else:
            term = F.when(column.isNotNull(), F.lit(_fixed_width(kind)))
        terms.append(F.coalesce(term.cast("long"), F.lit(0)))
    return reduce(lambda a, b: a + b, terms, F.lit(0).cast("long"))


def _fixed_width(kind: Any) -> int:
    """Bytes of a fixed-width value, as Spark's ``DataType.defaultSize``."""
    from pyspark.sql import types as T

    if isinstance(kind, T.DecimalType):
        return 8 if kind.precision <= 18 else 16
    widths = {T.ByteType: 1, T.BooleanType: 1, T.ShortType: 2, T.IntegerType: 4, T.FloatType: 4,
              T.DateType: 4, T.LongType: 8, T.DoubleType: 8, T.TimestampType: 8, T.TimestampNTZType: 8}
    return widths.get(type(kind), 8)


def conform(batch: DataFrame, expected: StructType, queue: str) -> DataFrame:
    """The batch's columns in the queue's order; raises before any write if they differ.

    Types are compared as Delta's append compares them: nullability (of a column, an array's
    elements, a map's values, a struct's fields) may differ, and a null-only (void) column takes
    the queue column's type."""
    from pyspark.sql.types import NullType

    have = {f.name: f.dataType for f in batch.schema.fields}
    want = {f.name: f.dataType for f in expected.fields}
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    wrong = [f"{n} is {have[n].simpleString()}, queue has {want[n].simpleString()}"
             for n in want if n in have and not isinstance(have[n], NullType)
             and _nullable(have[n]) != _nullable(want[n])]
    if missing or extra or wrong:
        detail = "; ".join(
            part for part in (
                f"missing columns {missing}" if missing else "",
                f"unknown columns {extra}" if extra else "",
                "; ".join(wrong),
            ) if part
        )
        raise SchemaMismatchError(queue, expected.simpleString(), batch.schema.simpleString(), detail)
    void = [n for n in want if isinstance(have[n], NullType)]
    if list(have) == list(want) and not void:
        return batch
    from pyspark.sql import functions as F

    return batch.select(*[F.col(f"`{n}`").cast(want[n]).alias(n) if n in void else F.col(f"`{n}`") for n in want])


def _nullable(kind: DataType) -> DataType:
    """``kind`` with every nested field, element and value nullable."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(kind, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return ArrayType(_nullable(kind.elementType), True)
    if isinstance(kind, MapType):
        return MapType(_nullable(kind.keyType), _nullable(kind.valueType), True)
    return kind


def order_key(name: str, kind: DataType) -> Column:
    """A column that orders rows by ``name``'s content: the column itself, or, for types Spark
    cannot hash or sort (maps, variants, anything holding one), its JSON with microseconds."""
    from pyspark.sql import functions as F

    column = F.col(f"`{name}`")
    if not any(word in kind.simpleString() for word in ("map<", "variant")):
        return column
    return F.to_json(column, {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                              "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"})


@contextlib.contextmanager
def cached(batch: DataFrame) -> Iterator[DataFrame]:
    """The batch, cached while the sink works on it: measured then written, it would read the
    source twice (and Spark would report twice its ``numInputRows``).

    Cached uncompressed (set in the batch's session, the query's own, until the batch is
    written): it is read once more, so compressing it costs more than it saves (the benchmark,
    ``bench/overhead.py``, measures the sink's cost per batch)."""
    conf = batch.sparkSession.conf
    compressed = conf.get(_COMPRESSED) or "true"
    conf.set(_COMPRESSED, "false")
    cached = batch.persist()
    try:
        yield cached
    finally:
        unpersist(cached)
        conf.set(_COMPRESSED, compressed)


def measure(rows: DataFrame, totals: tuple[Column, Column]) -> tuple[int, int]:
    """Count and size the rows in one Spark stage, by observing a ``noop`` write: an aggregate
    needs a shuffle, two jobs under AQE."""
    from pyspark.sql import Observation

    observation = Observation()
    rows.observe(observation, *totals).write.format("noop").mode("overwrite").save()
    metrics = observation.get
    return int(metrics["count"]), int(metrics["size"])


def unpersist(rows: DataFrame) -> None:
    """Free a cached batch. Fails when the query is being stopped (its thread is interrupted);
    Spark frees the cached blocks with the session then."""
    with contextlib.suppress(Exception):
        rows.unpersist()
