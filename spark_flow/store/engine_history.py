"""A Delta table's commit history as the engine reads it (``DESCRIBE HISTORY``), for
:class:`~spark_flow.store.engine.EngineTable`: its newest version, each commit's operation, and
the newest commits' infos kept.

``DESCRIBE HISTORY`` runs a Spark job (Delta reads the commit files in one), about 0.15 s on 2
cores whether it reads one commit or eight and twice that under load, where ``DESCRIBE DETAIL``
costs 0.03 s. So every read keeps what it read, and one history serves every handle on the table
in this process (:func:`history_of`): a producer's gate, its writer and a status look at one
queue ask for its newest version within a second of each other.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How many of a table's newest commit infos are kept (a queue's ledger asks for the ones since
#: its last look, most often one).
KEPT_INFOS = 8
#: How recent (seconds) a read of the newest version answers for every handle on the table in
#: this process, unless this process wrote the table since: a look then sees the table as it was
#: up to that long ago, as a look that took that long would; this process's own writes are
#: always seen (a producer's next look after its write reads again).
FRESH_FOR = 1.0

#: Each table's history, by the session's and the table's names, while a handle holds it.
_SHARED: weakref.WeakValueDictionary[tuple[str, str], EngineHistory] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _key(spark: SparkSession, name: str) -> tuple[str, str]:
    """Whose table ``name`` is: a Spark Connect session's (each its own server and catalog), or
    a classic SparkContext's (a classic session and the ones a stream clones from it, each a new
    Python object, share its catalog)."""
    connect_session = getattr(spark, "session_id", None)
    return str(connect_session or id(spark.sparkContext)), name


def history_of(spark: SparkSession, name: str) -> EngineHistory:
    """The history of the table Spark SQL names ``name`` that every handle on it through
    ``spark`` shares."""
    key = _key(spark, name)
    with _SHARED_LOCK:
        history = _SHARED.get(key)
        if history is None:
            history = _SHARED[key] = EngineHistory(spark, name)
        return history


def wrote(spark: SparkSession, name: str) -> None:
    """This process committed to table ``name`` (or tried to): its next look reads again."""
    with _SHARED_LOCK:
        history = _SHARED.get(_key(spark, name))
    if history is not None:
        history.written()


def forget(spark: SparkSession, name: str) -> None:
    """Table ``name`` was dropped or made again: its versions start over."""
    with _SHARED_LOCK:
        _SHARED.pop(_key(spark, name), None)


class EngineHistory:
    """The commit history of the table Spark SQL names ``name``, read through ``spark``."""

    def __init__(self, spark: SparkSession, name: str) -> None:
        self._spark, self._name = spark, name
        self._lock = threading.RLock()  # one read at a time: a handle waiting on another's read takes its answer
        self.seen = (-math.inf, -1)  # when the newest version was last read (the read's start), and which
        self.answered = -math.inf  # when that read ended: the table was there until then
        self.operations: dict[int, str] = {}  # each commit's operation, as a read gave it
        self._infos: dict[int, dict[str, Any]] = {}  # the newest commits' infos read (KEPT_INFOS of them)

    def latest(self) -> int:
        """The table's newest version (its commit info kept), as read within :data:`FRESH_FOR`."""
        with self._lock:
            if time.monotonic() - self.seen[0] >= FRESH_FOR:
                self._read(1)
            return self.seen[1]

    def written(self) -> None:
        """The table was written by this process: the next :meth:`latest` reads again."""
        with self._lock:
            self.seen = (-math.inf, self.seen[1])
            self.answered = -math.inf

    def infos(self, first: int, last: int) -> list[dict[str, Any]]:
        """The commit infos of versions ``first`` through ``last``, newest first: kept ones, else
        the newest commits down to ``first`` (more, when commits landed since the last look)."""
        wanted = range(first, last + 1)
        with self._lock:
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
        """The newest ``limit`` commit infos, kept by version; the newest version seen."""
        started = time.monotonic()
        frame = self._spark.sql(f"DESCRIBE HISTORY {self._name} LIMIT {limit}").selectExpr(
            "version", "unix_millis(timestamp) AS timestamp", "operation", "operationMetrics", "userMetadata")
        rows = [row.asDict(recursive=True) for row in frame.collect()]
        newest = max((int(row["version"]) for row in rows), default=-1)
        if self._infos and newest < max(self._infos):  # made again at this location: its versions start over
            self._infos.clear()
            self.operations.clear()
        self.seen, self.answered = (started, newest), time.monotonic()
        self.operations.update((int(row["version"]), str(row["operation"])) for row in rows)
        self._infos.update((int(row["version"]), row) for row in rows)
        for version in [v for v in self._infos if v <= newest - KEPT_INFOS]:
            del self._infos[version]
        return rows
