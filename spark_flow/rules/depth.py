"""A queue's depth, its positions, and what each commit enqueued, as values.

The depth of a subscription is the sum over the messages after its ack position (a
:class:`Position`: a commit version and a message index inside the next commit). Each commit's
count and size come from its commit info (:func:`commit_from_info`: ``userMetadata`` written by
the sink, or the writer's ``operationMetrics`` for plain Delta writers), which the ledger
(:mod:`spark_flow.store.ledger`) reads from the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Key of the sink's entry in a commit's ``userMetadata`` JSON.
METADATA_KEY = "spark.flow"

# Operations that add messages, and the metrics that count them: (rows, bytes) as delta-spark
# names them, then as delta-rs does (it reports no bytes).
_APPEND_METRICS = {
    "WRITE": ("numOutputRows", "numOutputBytes"),
    "STREAMING UPDATE": ("numOutputRows", "numOutputBytes"),
    "CREATE TABLE AS SELECT": ("numOutputRows", "numOutputBytes"),
    "CREATE OR REPLACE TABLE AS SELECT": ("numOutputRows", "numOutputBytes"),
    "MERGE": ("numTargetRowsInserted", None),
}
_RS_ROWS = {"WRITE": "num_added_rows", "MERGE": "num_target_rows_inserted"}


@dataclass(frozen=True)
class Depth:
    """Messages enqueued and not yet acknowledged: a count and a size in bytes, and when the
    oldest of them was enqueued (ms since epoch, None when none waits), whose age is the
    backlog's third measure. Depths compare by count and size."""

    count: int = 0
    size: int = 0
    oldest: int | None = field(default=None, compare=False)

    def __add__(self, other: Depth) -> Depth:
        times = [t for t in (self.oldest, other.oldest) if t is not None]
        return Depth(self.count + other.count, self.size + other.size, min(times, default=None))

    @staticmethod
    def deepest(depths: Iterable[Depth]) -> Depth:
        """A queue's depth from its subscriptions' depths: per measure the deepest one's (the
        subscription that holds the producers first), and the oldest message of any."""
        depths = list(depths)
        times = [d.oldest for d in depths if d.oldest is not None]
        return Depth(max((d.count for d in depths), default=0), max((d.size for d in depths), default=0),
                     min(times, default=None))

    def age(self, now_ms: int) -> float:
        """Seconds the oldest message has waited at ``now_ms``; 0 when none waits."""
        return max(0.0, (now_ms - self.oldest) / 1000) if self.oldest is not None else 0.0


@dataclass(frozen=True, order=True)
class Position:
    """A place in a queue: every message through queue version ``version``, and the first
    ``index`` messages of version ``version + 1`` in the commit's fixed order (see
    :mod:`spark_flow.store.messages`). ``index`` 0 is a whole-commit position, which is all
    an offset or ack position written before positions had an index can be. A position whose
    index reaches its commit's count is written as the next version's, so positions compare
    as tuples."""

    version: int
    index: int = 0

    @classmethod
    def of(cls, position: Position | int) -> Position:
        """A position given as one, or as a queue version (all of its messages)."""
        return position if isinstance(position, Position) else cls(int(position))

    @property
    def reached(self) -> int:
        """The newest version the position reaches into: ``version + 1`` when it is inside it."""
        return self.version + 1 if self.index else self.version


@dataclass(frozen=True)
class Commit:
    """One commit of a queue table: its version, time (ms since epoch) and what it enqueued.

    A sink's commit also says which producer (with its ``pacingWeight``), streaming query and
    micro-batch wrote it, and how long that batch had been held (flow control) and throttled
    (publish rate, pace) before this write: what a query listener in any process reports."""

    version: int
    timestamp: int
    count: int
    size: int
    query: str | None = None
    producer: str | None = None
    weight: int = 1
    batch: int | None = None
    held: float = 0.0
    throttled: float = 0.0

    def size_of(self, index: int) -> int:
        """Bytes of the commit's first ``index`` messages. The log records a commit's size only
        as a total (a message's size is a Spark expression of the producer's, or a plain
        writer's file bytes), so each message is charged its share: the parts of a commit add
        up to its size exactly, and a depth stays a sum over log metadata."""
        return self.size * index // self.count if self.count else 0

    def part(self, first: int, last: int) -> Depth:
        """The commit's messages ``first <= i < last``, as a depth."""
        count = last - first
        return Depth(count, self.size_of(last) - self.size_of(first), self.timestamp if count else None)


def commit_from_info(info: Mapping[str, Any]) -> Commit:
    """Read one commit-info entry (as ``DeltaTable.history`` returns it) as a :class:`Commit`.

    The sink's ``userMetadata`` is exact. A plain writer's commit counts its output rows and,
    as the size, the bytes of the Parquet files it wrote (delta-spark; delta-rs reports none,
    so its size is 0). Commits that add no messages (DELETE, OPTIMIZE, property changes) count 0.
    """
    version, timestamp = int(info["version"]), int(info.get("timestamp") or 0)
    flow = _sink_metadata(info.get("userMetadata"))
    if flow is not None:
        return Commit(version, timestamp, **flow)
    operation = info.get("operation", "")
    metrics = info.get("operationMetrics") or {}
    rows_key, bytes_key = _APPEND_METRICS.get(operation, (None, None))
    if rows_key in metrics:
        return Commit(version, timestamp, int(metrics[rows_key]), int(metrics.get(bytes_key, 0) if bytes_key else 0))
    if _RS_ROWS.get(operation) in metrics:
        return Commit(version, timestamp, int(metrics[_RS_ROWS[operation]]), 0)
    return Commit(version, timestamp, 0, 0)


def _sink_metadata(user_metadata: Any) -> dict[str, Any] | None:
    """The sink's entry in a commit's ``userMetadata`` as :class:`Commit` fields; None if it is
    not the sink's."""
    if not user_metadata:
        return None
    try:
        parsed = json.loads(user_metadata) if isinstance(user_metadata, str) else user_metadata
        flow = parsed.get(METADATA_KEY) if isinstance(parsed, Mapping) else None
        if not isinstance(flow, Mapping):
            return None
        count, size = int(flow["count"]), int(flow["size"])
        fields = {"count": count, "size": size, "query": flow.get("query"), "producer": flow.get("producer"),
                  "weight": max(1, int(flow.get("weight", 1))),
                  "batch": None if flow.get("batch") is None else int(flow["batch"]),
                  "held": float(flow.get("held", 0.0)), "throttled": float(flow.get("throttled", 0.0))}
    except (KeyError, TypeError, ValueError):
        return None
    return fields if count >= 0 and size >= 0 else None
