"""How many messages and bytes each commit of a queue table added, read from its Delta log.

The ledger reads commit infos (:func:`~spark_flow.rules.depth.commit_from_info`) only for
commits it has not seen yet, and keeps the commits not yet acknowledged by every subscription.
So a depth costs the new commits since the last look, never the table's size or the messages
already consumed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from spark_flow.rules.depth import Commit, Depth, Position, commit_from_info

if TYPE_CHECKING:
    from deltalake import DeltaTable


class Ledger:
    """The commits of one queue table after a floor version, kept up to date incrementally."""

    def __init__(self, table: DeltaTable) -> None:
        self._table = table
        self._commits: dict[int, Commit] = {}
        self._lock = threading.Lock()
        self.reads = 0  # commit infos read from the log, for tests and benchmarks

    @property
    def table(self) -> DeltaTable:
        return self._table

    def refresh(self) -> int:
        """Catch up with the table's log; return its latest version."""
        with self._lock:
            self._table.update_incremental()
            return self._table.version()

    def commits(self, after: int, upto: int | None = None) -> list[Commit]:
        """The commits with ``after < version <= upto`` (default: the latest seen), oldest first."""
        with self._lock:
            latest = self._table.version() if upto is None else upto
            missing = [v for v in range(after + 1, latest + 1) if v not in self._commits]
            if missing:
                for info in self._history_from(missing[0]):
                    commit = commit_from_info(info)
                    if commit.version > after:
                        self._commits.setdefault(commit.version, commit)
                    self.reads += 1
            return [self._commits[v] for v in range(after + 1, latest + 1) if v in self._commits]

    def _history_from(self, first: int) -> list[dict[str, Any]]:
        """The commit infos from version ``first`` on. deltalake's ``history(n)`` reads the
        newest n commits in storage but numbers them from the handle's loaded version
        (deltalake 1.6.6): with a commit landed since the handle's last refresh, every one would
        carry the number of the commit before it. So it is read again until the handle was the
        newest before and after the read."""
        while True:
            newest = self._table.version()
            infos = self._table.history(newest - first + 1)
            self._table.update_incremental()
            if self._table.version() == newest:
                return infos

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
