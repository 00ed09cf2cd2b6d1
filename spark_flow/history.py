"""The transition history of one queue: every flow STOPPED / RESUMED, with the depth and the
thresholds that caused it, appended to a small Delta table beside the subscriptions.

Appends are blind Delta commits through ``deltalake``, so gates in several processes record
transitions without a lock and without a SparkSession.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_flow.ledger import Depth
    from spark_flow.state import FlowState, Thresholds


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("queue", pa.string(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("flow_stopped", pa.bool_(), nullable=False),
        pa.field("flow_stopped_count", pa.int64(), nullable=False),
        pa.field("depth_count", pa.int64(), nullable=False),
        pa.field("depth_size", pa.int64(), nullable=False),
        pa.field("stop_count", pa.int64(), nullable=False),
        pa.field("resume_count", pa.int64(), nullable=False),
        pa.field("stop_size", pa.int64(), nullable=False),
        pa.field("resume_size", pa.int64(), nullable=False),
    ])


class HistoryTable:
    """Flow transitions of one queue, at ``location``."""

    def __init__(self, location: str, queue: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.location = location
        self.queue = queue
        self._storage_options = dict(storage_options or {}) or None

    def record(self, subscription: str, state: FlowState, depth: Depth, thresholds: Thresholds) -> None:
        """Append one transition."""
        import pyarrow as pa
        from deltalake import write_deltalake

        row = {
            "time": datetime.now(UTC), "queue": self.queue, "subscription": subscription,
            "flow_stopped": state.flow_stopped, "flow_stopped_count": state.flow_stopped_count,
            "depth_count": depth.count, "depth_size": depth.size,
            "stop_count": thresholds.stop_count, "resume_count": thresholds.resume_count,
            "stop_size": thresholds.stop_size, "resume_size": thresholds.resume_size,
        }
        write_deltalake(self.location, pa.Table.from_pylist([row], schema=_schema()), mode="append",
                        storage_options=self._storage_options)

    def read(self) -> list[dict]:
        """Every recorded transition, oldest first."""
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.location, storage_options=self._storage_options):
            return []
        rows = DeltaTable(self.location, storage_options=self._storage_options).to_pyarrow_table().to_pylist()
        return sorted(rows, key=lambda r: (r["time"], r["flow_stopped_count"], not r["flow_stopped"]))
