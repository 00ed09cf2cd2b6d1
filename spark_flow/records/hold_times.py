"""How long each producer query's last held micro-batch waited after its writes, per queue.

A ``hold`` producer's batch is written, then held until the queue resumes: that wait comes
after the batch's last commit, so the commit's metadata cannot say how long it was. The sink
records it here, only when it held (a stopped queue), so a query listener in any process (a
Spark Connect client too) can report it; a batch that was not held writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_flow.store.table import ALL, Merge, sql_string
from spark_flow.store.tables import Owner, RecordTable

if TYPE_CHECKING:
    import pyarrow as pa


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("query", pa.string(), nullable=False),
        pa.field("batch", pa.int64(), nullable=False),
        pa.field("held_seconds", pa.float64(), nullable=False),
        pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ])


class HoldTimes:
    """The completion holds of one queue's producer queries, at ``location``: one row per query,
    its last held batch; written while ``owner``, the queue, is there (a producer stopped while
    held by a deleted queue records nothing)."""

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None, *,
                 owner: Owner | None = None) -> None:
        self._table = RecordTable(location, storage_options, owner=owner)

    def record(self, query: str, batch: int, seconds: float) -> None:
        """Record that ``query``'s batch ``batch`` was held ``seconds`` after its writes."""
        import pyarrow as pa

        row = pa.Table.from_pylist([{"query": query, "batch": batch, "held_seconds": seconds,
                                     "updated_at": datetime.now(UTC)}], schema=_schema())
        self._table.upsert(row, Merge(f"t.query = {sql_string(query)}", update=ALL, insert=ALL))

    def seconds(self, query: str, batch: int) -> float:
        """How long ``query``'s batch ``batch`` was held after its writes: 0 if it was not."""
        return next((r["held_seconds"] for r in self._table.rows() if r["query"] == query and r["batch"] == batch),
                    0.0)
