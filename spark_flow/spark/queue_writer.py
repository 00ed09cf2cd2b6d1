"""Writing a producer's rows into one queue: the application's writer claim, the append, and
Delta's retries.

An append is one idempotent commit (``txnAppId``/``txnVersion``, so a replayed write is written
once) with the sink's ``userMetadata``. A table that needs nothing of Delta's writer is appended
to as Parquet files and a deltalake commit (:mod:`spark_flow.store.appends`); any other by Delta's
writer, tried again when a metadata commit on the queue at the same time (ALTER TBLPROPERTIES,
a declare, a process recording its conf's settings) fails it with Delta's
``MetadataChangedException``. Where Delta's commits are safe for one application only (S3 with
the single-driver LogStore), the application claims the queue before its first write and renews
the claim before each (:mod:`spark_flow.records.writer_claim`).

A deleted queue is written nothing: each append first checks that the queue's table is there,
and an append that races the deletion (its files written, its commit refused, or Delta's writer
making a new table in the queue's place) removes what it left and raises
:class:`~spark_flow.exceptions.QueueNotFoundError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from spark_flow.flow.queue import WRITERS
from spark_flow.records.subscriptions import PROCESS
from spark_flow.records.writer_claim import WriterClaim, needs_claim
from spark_flow.rules.names import state_member
from spark_flow.spark.session import is_connect
from spark_flow.store.appends import DirectAppender
from spark_flow.store.engine import made_elsewhere, save
from spark_flow.store.io import uses_engine
from spark_flow.store.table import retry, with_transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_flow.flow.queue import Queue

log = logging.getLogger("spark_flow.spark.sink")

_WRITE_RETRIES = 10


class QueueWriter:
    """Appends to ``queue`` for one producer.

    Parameters
    ----------
    queue : Queue
    storage_options : mapping
        deltalake storage options (object store credentials).
    delta_conf : mapping
        The session's ``spark.delta.*`` settings and ``spark.app.id``: whether the queue's
        LogStore needs a claim, and the application that claims it.
    """

    def __init__(self, queue: Queue, storage_options: Mapping[str, str], delta_conf: Mapping[str, str]) -> None:
        self.queue = queue
        self._claim: WriterClaim | None = None
        if needs_claim(queue.path, delta_conf):  # before this application writes anything there
            self._claim = WriterClaim(state_member(queue.state_location, WRITERS), queue.name, queue.path,
                                      delta_conf.get("spark.app.id") or PROCESS, storage_options, owner=queue.owner)
            self._claim.renew()
        # the engine appends with Delta's writer: a direct append's commit is deltalake's
        self._appender = None if uses_engine(queue.path, storage_options) else DirectAppender(queue.path,
                                                                                               storage_options)
        self._delta_writer_logged = False

    def append(self, rows: DataFrame, app_id: str, txn_version: int, metadata: str) -> None:
        """Append ``rows`` as one commit, once for (``app_id``, ``txn_version``), with
        ``metadata`` as its ``userMetadata``."""
        self.queue.owner.write(lambda: self._append(rows, app_id, txn_version, metadata))

    def _append(self, rows: DataFrame, app_id: str, txn_version: int, metadata: str) -> None:
        if self._claim is not None:  # only one application may write it: renew this one's claim
            self._claim.renew()
        if self._appender is not None and self._appender.append(rows, app_id, txn_version, metadata):
            return
        if self._appender is not None and not self._delta_writer_logged:
            self._delta_writer_logged = True
            log.info("queue %r is appended to by Delta's writer: its table has %s", self.queue.name,
                     self._appender.refusal())
        conflicts = _commit_conflicts(rows.sparkSession)
        writer = (rows.write.format("delta").mode("append").option("txnAppId", app_id)
                  .option("txnVersion", str(txn_version))
                  .option("userMetadata", with_transaction(metadata, (app_id, txn_version))))

        def write() -> None:
            try:
                save(writer, self.queue.path)
            finally:
                made_elsewhere(self.queue.path)  # the gate's next look at the queue sees this commit
            self.queue.owner.require()  # Delta's writer made a new table where the queue was

        retry(write, conflicts, attempts=_WRITE_RETRIES, delay=0.05, longest=1.0,
              said=lambda error: log.info("queue %r: its metadata changed during an append (%s); appending again",
                                          self.queue.name, type(error).__name__))


def _commit_conflicts(spark: SparkSession) -> tuple[type[Exception], ...]:
    """Delta's metadata and protocol conflicts, which an append retries, as this session's client
    raises them: Delta's exceptions module for the client (py4j or Connect) turns the server's
    errors into subclasses of these."""
    if is_connect(spark):
        import delta.connect.exceptions
    else:
        import delta.exceptions  # noqa: F401
    from delta.exceptions.base import MetadataChangedException, ProtocolChangedException

    return MetadataChangedException, ProtocolChangedException
