"""The starts of a queue's consumers through the engine: a row appended at each start, which those
consumers' streams read beside the queue.

A consumer through the engine (Delta's source, :mod:`spark_flow.spark.engine_source`)
acknowledges a batch when Spark reports the batch's progress, after its sink and its checkpoint
committed it. A process that died in between left that batch unacknowledged; restarted while
nothing new is in the queue, its query would run no batch, and Spark reports an idle query
without its offsets: the subscription would go on counting what was consumed, and a producer
held by it would wait for good. The row a start appends here is new data for the consumer's
stream (none of it delivered), so every start runs a batch, whose progress names the queue's
offset, and that is acknowledged. A start that finds its subscription acknowledged up to the
queue's newest version appends nothing: there is nothing a batch could acknowledge.

A start's row is a file: Delta compacts the table's files once they are many (auto compaction,
a table property; its commits change no data, and Delta's source skips them), so a consumer
scheduled every minute does not leave its stream a file a minute to list at each start.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_flow.store.tables import Owner, RecordTable

if TYPE_CHECKING:
    import pyarrow as pa


#: The table's properties: Delta's auto compaction, after a write that leaves many small files.
_COMPACTED = {"delta.autoOptimize.autoCompact": "true"}


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("started_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ])


class ConsumerStarts:
    """The consumer starts of one queue, at ``location``; written while ``owner``, the queue, is
    there."""

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None, *,
                 owner: Owner | None = None) -> None:
        self.location = location
        self._table = RecordTable(location, storage_options, owner=owner)

    def exists(self) -> bool:
        """Whether a start was recorded (the table made)."""
        return self._table.open() is not None

    def record(self, subscription: str) -> None:
        """Append a start of a consumer of ``subscription`` (the table made by the first)."""
        import pyarrow as pa

        self._table.append(pa.Table.from_pylist([{"subscription": subscription, "started_at": datetime.now(UTC)}],
                                                schema=_schema()), properties=_COMPACTED)
