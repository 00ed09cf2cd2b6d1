"""How much of a subscription's backlog the next micro-batch takes: the flowqueue source's read
limits, as Spark's Kafka source (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay``, SPARK-35312) and its file source and Delta (``maxBytesPerTrigger``) define them.

Positions are commit versions, so a batch is whole commits: as Delta's ``maxBytesPerTrigger``,
at least one commit even when it alone exceeds a maximum (a batch never stops the queue), and the
maxima together (a batch within every one). Spark 4.2's Python data source API has no composite
read limit: the source hands Spark one limit and applies all of them here, unless Spark asks
for everything available (``Trigger.Once``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, ReadMinRows

from spark_flow.ledger import Commit

#: Kafka's default ``maxTriggerDelay``.
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0


@dataclass(frozen=True)
class ReadLimits:
    """A consumer's read limits, parsed once (``SourceOptions``); None = not set.

    ``min_records`` holds a batch back until that many messages wait, for at most
    ``max_trigger_delay`` seconds since the last batch (Kafka's ``minOffsetsPerTrigger``).
    """

    max_records: int | None = None
    max_bytes: int | None = None
    min_records: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY

    def spark_limit(self) -> ReadLimit:
        """The one limit Spark is given (it passes it back to ``latestOffset`` as it is, or
        ``ReadAllAvailable`` under ``Trigger.Once``): the first limit set, else everything."""
        if self.max_records is not None:
            return ReadMaxRows(self.max_records)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        if self.min_records is not None:
            return ReadMinRows(self.min_records)
        return ReadAllAvailable()

    def end(self, commits: Sequence[Commit], waited: float, limit: ReadLimit) -> int | None:
        """The last version the next batch takes of ``commits`` (oldest first), or None to take
        nothing yet: none wait, or fewer than ``min_records`` and the last batch was ``waited``
        seconds ago, less than ``max_trigger_delay``."""
        if not commits:
            return None
        if isinstance(limit, ReadAllAvailable):
            return commits[-1].version
        waiting = sum(c.count for c in commits)
        if self.min_records is not None and waiting < self.min_records and waited < self.max_trigger_delay:
            return None
        end, rows, size = commits[0].version, 0, 0
        for commit in commits:
            if rows and self._over(rows + commit.count, size + commit.size):
                break
            end, rows, size = commit.version, rows + commit.count, size + commit.size
        return end

    def _over(self, rows: int, size: int) -> bool:
        return (self.max_records is not None and rows > self.max_records) or (
            self.max_bytes is not None and size > self.max_bytes)
