"""A queue append as one Spark job and one deltalake commit.

Delta's writer (``df.write.format("delta")``) spends most of a small micro-batch outside the job
that writes its files: 460 ms for a 20,000-message batch where Spark writes the same Parquet
files in 125 ms and deltalake commits them in 5 ms (``bench/overhead.py``). So a queue whose
table needs nothing of Delta's writer but files and a commit is appended to that way: Spark
writes the batch's Parquet files into a new directory of the table, and deltalake commits them
as one append carrying the producer's ``txnAppId``/``txnVersion`` and ``userMetadata``, as a
conditional commit (a concurrent append is rebased on; a concurrent metadata change is read and
judged again). Files whose commit never happened (a process killed in between) are in no
version of the table; a full VACUUM past the retention removes them.

A table that needs Delta's writer is appended to by it: column mapping, NOT NULL columns, CHECK
constraints, invariants, generated, identity and char/varchar columns, partition columns, and
writer features deltalake does not write (:func:`direct_append_refusal` says which).
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_flow.store.io import deltalake_options
from spark_flow.store.table import retry_commit, with_transaction

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

#: Writer features a direct append leaves nothing to do for: appends keep them.
_PLAIN_FEATURES = frozenset({"appendOnly", "invariants", "changeDataFeed", "timestampNtz"})
#: Column metadata only Delta's writer acts on.
_WRITER_COLUMN_METADATA = ("delta.invariants", "delta.generationExpression", "delta.identity",
                           "__CHAR_VARCHAR_TYPE_STRING")


def direct_append_refusal(table: DeltaTable) -> str | None:
    """Why ``table`` needs Delta's writer for an append (None: Parquet files and a commit do)."""
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.writer_features or ())
    if protocol.min_writer_version in (5, 6) or protocol.min_writer_version > 7:
        return f"writer version {protocol.min_writer_version}"
    if not features <= _PLAIN_FEATURES:
        return f"writer features {sorted(features - _PLAIN_FEATURES)}"
    configuration = metadata.configuration
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return "column mapping"
    constraints = sorted(k for k in configuration if k.startswith("delta.constraints."))
    if constraints:
        return f"CHECK constraints {constraints}"
    if metadata.partition_columns:
        return f"partition columns {list(metadata.partition_columns)}"
    return _writer_only(json.loads(table.schema().to_json()))


def _writer_only(kind: Any, where: str = "") -> str | None:
    """The first NOT NULL field or writer-only column metadata in a Delta schema (JSON)."""
    if not isinstance(kind, dict):
        return None
    if kind.get("type") == "struct":
        for field in kind["fields"]:
            name = f"{where}{field['name']}"
            if not field.get("nullable", True):
                return f"NOT NULL column {name!r}"
            marked = [key for key in _WRITER_COLUMN_METADATA if key in (field.get("metadata") or {})]
            if marked:
                return f"column {name!r} has {marked[0]}"
            found = _writer_only(field["type"], f"{name}.")
            if found:
                return found
        return None
    if kind.get("type") == "array":
        if not kind.get("containsNull", True):
            return f"NOT NULL elements of {where.rstrip('.')!r}"
        return _writer_only(kind["elementType"], where)
    if kind.get("type") == "map":
        if not kind.get("valueContainsNull", True):
            return f"NOT NULL values of {where.rstrip('.')!r}"
        return _writer_only(kind["keyType"], where) or _writer_only(kind["valueType"], where)
    return None


class DirectAppender:
    """Appends to one queue table as a Spark write of Parquet files and a deltalake commit.

    Parameters
    ----------
    location : str
        The table's location, as Spark and deltalake both address it.
    storage_options : mapping, optional
        deltalake storage options (object store credentials).
    """

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None) -> None:
        from deltalake import DeltaTable

        self.location = location
        self._table = DeltaTable(location, storage_options=deltalake_options(storage_options))

    def refusal(self) -> str | None:
        """Why the table needs Delta's writer now (None: it does not)."""
        self._table.update_incremental()
        return direct_append_refusal(self._table)

    def append(self, rows: DataFrame, app_id: str, txn_version: int, user_metadata: str) -> bool:
        """Append ``rows`` once for (``app_id``, ``txn_version``): False if the table needs
        Delta's writer, before the write or by the commit (nothing is committed then)."""
        from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

        if self.refusal() is not None:
            return False
        directory = uuid.uuid4().hex
        target = posixpath.join(self.location.rstrip("/"), directory)
        # One write job into a new folder (the default mode: it must not exist); no _SUCCESS
        # marker, a hidden file VACUUM would keep forever.
        rows.write.option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false").parquet(target)
        actions: list[AddAction | RemoveAction] = [AddAction(f"{directory}/{path.rsplit('/', 1)[1]}", size, {}, modified, True,
                             json.dumps({"numRecords": records}))
                   for path, size, modified, records in _written_files(rows, target)]
        properties = CommitProperties(custom_metadata={"userMetadata": with_transaction(user_metadata,
                                                                                        (app_id, txn_version))},
                                      app_transactions=[Transaction(app_id, txn_version)])

        def attempt() -> bool:
            if self.refusal() is not None:
                return False
            committed = self._table.transaction_version(app_id)
            if committed is not None and committed >= txn_version:
                return True  # an earlier run of this write committed it
            self._table.create_write_transaction(actions, "append", self._table.schema(),
                                                 commit_properties=properties)
            return True

        return retry_commit(attempt)


def _written_files(rows: DataFrame, target: str) -> list[tuple[str, int, int, int]]:
    """The Parquet files under ``target``: path, bytes, modification time (ms) and messages,
    the ``numRecords`` statistic Delta's readers count a table by and a purge counts what it
    removes by. One Spark job, which reads the files' row counts and no column."""
    from pyspark.sql import functions as F

    files = rows.sparkSession.read.parquet(target).groupBy(
        F.col("_metadata.file_path").alias("path"), F.col("_metadata.file_size").alias("size"),
        F.col("_metadata.file_modification_time").alias("modified")).count().collect()
    return [(row.path, int(row.size), int(row.modified.timestamp() * 1000), int(row["count"])) for row in files]
