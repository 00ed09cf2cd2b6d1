"""How much of a subscription's backlog the next micro-batch takes: the flowqueue source's read
limits, as Spark's Kafka source (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay``, SPARK-35312) and its file source and Delta (``maxBytesPerTrigger``) define them.

Positions address a message inside a commit, so a batch takes exactly ``maxRecordsPerTrigger``
messages (every batch full but the last), however the producers committed them, as Kafka's
``maxOffsetsPerTrigger``; ``maxBytesPerTrigger`` admits whole messages up to the limit, at least
one even when it alone exceeds it (a batch never stops the queue), with each message's bytes its
share of its commit's size (:meth:`~spark_flow.rules.depth.Commit.size_of`); and the maxima together
(a batch within every one). Spark 4.2's Python data source API has no composite
read limit: the source hands Spark one limit and applies all of them here, unless Spark asks
for everything available (``Trigger.Once``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, ReadMinRows

from spark_flow.rules.depth import Commit, Position

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

    def end(self, commits: Sequence[Commit], read: int, waited: float, limit: ReadLimit) -> Position | None:
        """Where the next batch ends in ``commits`` (oldest first, the first one's first
        ``read`` messages already read), or None to take nothing yet: fewer than ``min_records``
        wait and the last batch was ``waited`` seconds ago, less than ``max_trigger_delay``.
        Commits that carry no message (a property change, a purge) are passed over, as Delta's
        source passes its non-data commits: when no message waits, the end is the newest commit."""
        if not commits:
            return None
        waiting = sum(c.count for c in commits) - read
        if isinstance(limit, ReadAllAvailable) or waiting <= 0:
            return Position(commits[-1].version)
        if self.min_records is not None and waiting < self.min_records and waited < self.max_trigger_delay:
            return None
        end, rows, size = Position(commits[0].version - 1, read), 0, 0
        for commit in commits:
            first = end.index
            last = self._last(commit, first, rows, size)
            rows, size = rows + last - first, size + commit.size_of(last) - commit.size_of(first)
            if last < commit.count:
                return Position(commit.version - 1, last)
            end = Position(commit.version)
        return end

    def _last(self, commit: Commit, first: int, rows: int, size: int) -> int:
        """How far into ``commit`` (from message ``first``) a batch holding ``rows`` messages of
        ``size`` bytes goes within the maxima; at least one message into a batch still empty."""
        last = commit.count
        if self.max_records is not None:
            last = min(last, first + self.max_records - rows)
        if self.max_bytes is not None:
            room = self.max_bytes - size + commit.size_of(first)  # size_of(last) may reach this
            last = min(last, bisect.bisect_right(range(commit.count + 1), room, key=commit.size_of) - 1)
        return max(last, first + 1) if rows == 0 and first < commit.count else max(last, first)
