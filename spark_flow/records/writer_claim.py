"""One producer application per queue where Delta's commits are safe for one application only.

Delta on S3 (``s3a://``, ``s3://``) commits through ``S3SingleDriverLogStore`` unless told
otherwise: a lock inside one JVM, then an unconditional PUT of the commit file. Two Spark
applications appending to one queue there can overwrite each other's commit, and messages
vanish with no error on either side (delta-io/delta#1830). spark-flow cannot make Spark's
commit conditional, so a producer claims such a queue for its application before it writes, in
a small Delta table written with ``deltalake`` (whose commits on S3 are conditional PUTs, safe
across processes); a second live application is refused before it writes anything, with an
error saying what to configure. Queries of one application share the claim (the LogStore's
in-JVM lock orders their commits). A multi-cluster LogStore (``S3DynamoDBLogStore``), Databricks
(its own S3 commit service) and every other storage need no claim.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from spark_flow.exceptions import QueueWriterConflictError
from spark_flow.records.subscriptions import PROCESS, age, process_gone
from spark_flow.store.table import Merge
from spark_flow.store.tables import Owner, RecordTable

#: URI schemes whose Delta LogStore by default is safe for one application (S3SingleDriverLogStore).
SINGLE_DRIVER_SCHEMES = ("s3", "s3a", "s3n")
#: The LogStore Delta uses on S3 unless one is configured.
SINGLE_DRIVER_LOG_STORE = "io.delta.storage.S3SingleDriverLogStore"
#: A claim not renewed for this long (its application on another host, gone) may be taken over.
WRITER_TIMEOUT = 30.0


def log_store_key(path: str) -> str | None:
    """The Spark conf key of the Delta LogStore for ``path``'s scheme, when that scheme's
    default LogStore is safe for one application only; None otherwise."""
    scheme = path.partition("://")[0].lower() if "://" in path else ""
    return f"spark.delta.logStore.{scheme}.impl" if scheme in SINGLE_DRIVER_SCHEMES else None


def needs_claim(path: str, conf: Mapping[str, str]) -> bool:
    """Whether producers of the queue at ``path`` must claim it: its scheme's LogStore, as the
    Spark ``conf`` sets it, is Delta's single-driver one (not set, or set to it), and this is
    not Databricks (whose S3 commits are safe across clusters)."""
    key = log_store_key(path)
    if key is None or os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return False
    configured = conf.get(key) or conf.get("spark.delta.logStore.class")
    return configured in (None, "", SINGLE_DRIVER_LOG_STORE)


def _schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([pa.field("queue", pa.string(), nullable=False), pa.field("application", pa.string()),
                      pa.field("process", pa.string()), pa.field("seen", ts)])


class WriterClaim:
    """The claim of one application on one queue, in ``<state location>/writers``."""

    def __init__(self, location: str, queue: str, path: str, application: str,
                 storage_options: Mapping[str, str] | None = None, timeout: float = WRITER_TIMEOUT, *,
                 owner: Owner | None = None) -> None:
        self.queue, self.path, self.application, self.timeout = queue, path, application, timeout
        self._table = RecordTable(location, storage_options, owner=owner)
        self._renewed = -math.inf  # time.monotonic() of the last renewal

    def renew(self) -> None:
        """Claim the queue for this application, or renew the claim (a few times per timeout).

        Raises
        ------
        QueueWriterConflictError
            Another application holds the queue and is alive: seen within the timeout and, on
            this host, its process still running.
        """
        if time.monotonic() - self._renewed < self.timeout / 3:
            return
        import pyarrow as pa

        self._table.create(_schema())
        while True:
            rows = [r for r in self._table.rows() if r["queue"] == self.queue]
            held = rows[0] if rows else None
            if held and held["application"] != self.application and not process_gone(
                    held["process"], held["seen"], self.timeout):
                raise QueueWriterConflictError(self.queue, self.path, held["application"], held["process"],
                                               age(held["seen"]), log_store_key(self.path) or "", self.timeout)
            row = {"queue": self.queue, "application": self.application, "process": PROCESS,
                   "seen": datetime.now(UTC), "was": held["application"] if held else ""}
            data = pa.Table.from_pylist([row])
            metrics = self._table.merge(data, Merge(
                "t.queue = s.queue", update={"application": "s.application", "process": "s.process", "seen": "s.seen"},
                update_when="coalesce(t.application, '') = s.was",
                insert={"queue": "s.queue", "application": "s.application", "process": "s.process", "seen": "s.seen"}))
            if metrics["num_target_rows_updated"] or metrics["num_target_rows_inserted"]:
                self._renewed = time.monotonic()
                return
