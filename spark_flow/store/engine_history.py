"""A Delta table's commit history as the engine reads it (``DESCRIBE HISTORY``), for
:class:`~spark_flow.store.engine.EngineTable`: its newest version, each commit's operation, and
the newest commits' infos kept.

``DESCRIBE HISTORY`` costs about 0.15 s on 2 cores whether it reads one commit or eight, where
``DESCRIBE DETAIL`` costs 0.03 s; so every read keeps what it read: a look that finds one new
commit (a producer's, after its own write) reads that commit's info from here, not again.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How many of a table's newest commit infos are kept (a queue's ledger asks for the ones since
#: its last look, most often one).
KEPT_INFOS = 8


class EngineHistory:
    """The commit history of the table Spark SQL names ``name``, read through ``spark``."""

    def __init__(self, spark: SparkSession, name: str) -> None:
        self._spark, self._name = spark, name
        self.seen = (-math.inf, -1)  # when the newest version was last read, and which
        self.operations: dict[int, str] = {}  # each commit's operation, as a read gave it
        self._infos: dict[int, dict[str, Any]] = {}  # the newest commits' infos read (KEPT_INFOS of them)

    def latest(self) -> int:
        """The table's newest version (its commit info kept)."""
        [newest] = self._read(1)
        self.seen = (time.monotonic(), int(newest["version"]))
        return self.seen[1]

    def infos(self, first: int, last: int) -> list[dict[str, Any]]:
        """The commit infos of versions ``first`` through ``last``, newest first: kept ones, else
        the newest commits down to ``first`` (more, when commits landed since the last look)."""
        wanted = range(first, last + 1)
        if all(version in self._infos for version in wanted):
            return [self._infos[version] for version in reversed(wanted)]
        newest = max(self.seen[1], last)
        while True:
            limit = max(1, newest - first + 1)
            rows = self._read(limit)
            if len(rows) < limit or min(int(row["version"]) for row in rows) <= first:
                break  # down to ``first``, or to the oldest commit the log keeps
            newest = max(int(row["version"]) for row in rows)
        return sorted((row for row in rows if first <= int(row["version"]) <= last), key=lambda r: -r["version"])

    def _read(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commit infos, kept by version."""
        frame = self._spark.sql(f"DESCRIBE HISTORY {self._name} LIMIT {limit}").selectExpr(
            "version", "unix_millis(timestamp) AS timestamp", "operation", "operationMetrics", "userMetadata")
        rows = [row.asDict(recursive=True) for row in frame.collect()]
        newest = max((int(row["version"]) for row in rows), default=-1)
        if self._infos and newest < max(self._infos):  # made again at this location: its versions start over
            self._infos.clear()
        self.operations.update((int(row["version"]), str(row["operation"])) for row in rows)
        self._infos.update((int(row["version"]), row) for row in rows)
        for version in [v for v in self._infos if v <= newest - KEPT_INFOS]:
            del self._infos[version]
        return rows
