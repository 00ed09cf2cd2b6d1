"""How many messages and bytes each commit of a queue table added, read from its Delta log.

The ledger reads commit infos (:func:`~spark_flow.rules.depth.commit_from_info`) only for
commits it has not seen yet, and keeps the commits not yet acknowledged by every subscription.
So a depth costs the new commits since the last look, never the table's size or the messages
already consumed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from spark_flow.rules.depth import Commit, Depth, Position, commit_from_info

if TYPE_CHECKING:
    from spark_flow.store.table import Table


class Ledger:
    """The commits of one queue table after a floor version, kept up to date incrementally."""

    def __init__(self, table: Table) -> None:
        self._table = table
        self._commits: dict[int, Commit] = {}
        self._lock = threading.Lock()
        self.reads = 0  # commit infos read from the log, for tests and benchmarks

    @property
    def table(self) -> Table:
        return self._table

    def refresh(self) -> int:
        """Catch up with the table's log; return its latest version."""
        with self._lock:
            return self._table.refresh()

    def commits(self, after: int, upto: int | None = None) -> list[Commit]:
        """The commits with ``after < version <= upto`` (default: the latest seen), oldest first."""
        with self._lock:
            latest = self._table.version() if upto is None else upto
            missing = [v for v in range(after + 1, latest + 1) if v not in self._commits]
            if missing:
                for info in self._table.commit_infos(missing[0]):
                    commit = commit_from_info(info)
                    if commit.version > after:
                        self._commits.setdefault(commit.version, commit)
                    self.reads += 1
            return [self._commits[v] for v in range(after + 1, latest + 1) if v in self._commits]

    def depth(self, after: Position | int, upto: int | None = None) -> Depth:
        """Messages and bytes enqueued after position ``after`` through version ``upto``, and
        the oldest one's time."""
        after, total = Position.of(after), Depth()
        for commit in self.commits(after.version, upto):
            first = after.index if commit.version == after.version + 1 else 0
            total += commit.part(first, commit.count)
        return total

    def forget(self, upto: int) -> None:
        """Drop the commits every subscription has acknowledged."""
        with self._lock:
            for version in [v for v in self._commits if v <= upto]:
                del self._commits[version]
