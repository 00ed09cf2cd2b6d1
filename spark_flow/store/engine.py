"""One Delta table read and written through the engine: the SparkSession at hand (classic or
Spark Connect), for governed compute, where only the engine holds the storage's credentials
(``spark.flow.io`` engine, or auto where this Python does not reach the storage).

Every call is Spark SQL or the DataFrame API, as Delta documents them: ``DESCRIBE HISTORY`` for
versions and commit infos, ``DESCRIBE DETAIL`` for properties, the change feed for messages,
``MERGE INTO`` with the same predicates as deltalake's (the compare-and-set), ``DELETE``, ``ALTER
TABLE``, and Delta's idempotent writes (``txnAppId``/``txnVersion``, ``userMetadata``). Spark SQL
shows no ``txn`` action, so a transaction's last version is read from the commit infos, whose
``userMetadata`` names it (:func:`~spark_flow.store.table.with_transaction`, written by both ways).
Nothing here touches ``_jvm`` or a SparkContext: it runs under Spark Connect as it is.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import ConfigurationError
from spark_flow.rules.depth import commit_from_info
from spark_flow.rules.names import is_path
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.store.engine_history import FRESH_FOR, forget, history_of, wrote
from spark_flow.store.engine_sql import merge_sql, update_sql
from spark_flow.store.io import engine_session
from spark_flow.store.table import CommitConflict, Merge, sql_string, transaction_of, with_transaction

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Delta's answers for "no Delta table there", in either client's error text.
_NO_TABLE = re.compile(r"DELTA_MISSING_DELTA_TABLE|DELTA_TABLE_ONLY_OPERATION|DELTA_PATH_DOES_NOT_EXIST|"
                       r"DELTA_INVALID_PARTITION_PATH|"
                       r"PATH_NOT_FOUND|TABLE_OR_VIEW_NOT_FOUND|DELTA_TABLE_NOT_FOUND|is not a Delta table")
#: How long (seconds) a path found without a table is taken to have none (a queue's run-time
#: settings, made by the first ``spark-flow set``, are looked for at every look at the queue).
_ABSENT_FOR = 1.0
_ABSENT: dict[str, float] = {}  # path -> when it was found without a table
_NAMED: set[str] = set()  # catalog names this process found or made a table at
#: Operations that change a table's rows, never its properties or schema: a handle keeps its
#: ``DESCRIBE DETAIL`` across them (a queue's appends, its state's MERGEs).
DATA_OPERATIONS = frozenset({"WRITE", "STREAMING UPDATE", "MERGE", "DELETE", "UPDATE", "OPTIMIZE"})
#: Delta's concurrent-modification failures: the commit is built again on a fresh snapshot.
_CONFLICT = re.compile(r"Concurrent\w*Exception|MetadataChangedException|ProtocolChangedException|"
                       r"DELTA_CONCURRENT|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED")


def table_name(location: str) -> str:
    """How Spark SQL names the table: a path as ``delta.`<path>```, a catalog name as it is."""
    if is_path(location):
        return "delta.`" + location.replace("`", "``") + "`"
    return location


def load(reader: Any, location: str) -> DataFrame:
    """A (batch or streaming) reader's DataFrame of the table at ``location``: a path's, or a
    catalog table's by name."""
    frame: DataFrame = reader.load(location) if is_path(location) else reader.table(location)
    return frame


def save(writer: Any, location: str) -> None:
    """Run a DataFrame writer into the table at ``location``: a path's, or a catalog table's by name."""
    writer.save(location) if is_path(location) else writer.saveAsTable(location)


def _no_table(error: Exception) -> bool:
    return bool(_NO_TABLE.search(str(error)))


def _committed(spark_action: Any) -> Any:
    """Run a write; Delta's concurrent-modification failure raised as :class:`CommitConflict`."""
    try:
        return spark_action()
    except Exception as error:
        if _CONFLICT.search(type(error).__name__ + " " + str(error)):
            raise CommitConflict(str(error).splitlines()[0] if str(error) else type(error).__name__) from error
        raise


def _frame(spark: SparkSession, rows: pa.Table) -> DataFrame:
    """Arrow rows as a DataFrame (null-typed columns, which one_row gives a None, as strings)."""
    import pyarrow as pa

    schema = _nullable_strings(rows.schema)
    if not rows.num_rows:  # Spark Connect infers no schema from an empty table (CANNOT_INFER_EMPTY_SCHEMA)
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(schema))
    return spark.createDataFrame(pa.Table.from_arrays([column.cast(field.type) for column, field
                                                       in zip(rows.columns, schema, strict=True)], schema=schema))


def engine_is_table(location: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Whether a Delta table is at ``location``, as the engine sees it. A path is looked at by
    listing its log through the engine's file source: Delta's own look at a path inside another
    table (a queue's state, ``<queue>/_flow/...``) prints a warning about partition paths before
    it fails. The log is named by a glob (``_delta_log`` is hidden to a file source named
    plainly) given twice (Spark's look for a streaming sink's metadata at a single path logs a
    stack when the path is not there). A catalog name is asked of the catalog, then, when there
    is a table, of Delta (``DESCRIBE DETAIL``: its format)."""
    spark = engine_session(location)
    if time.monotonic() - _ABSENT.get(location, -math.inf) < _ABSENT_FOR:
        return False
    if is_path(location):
        log = location.rstrip("/") + "/_delta_lo[g]/*"
        try:
            if spark.read.format("binaryFile").load([log, log]).select("path").limit(1).collect():
                return True
        except Exception as error:
            if not _no_table(error):
                raise
        _ABSENT[location] = time.monotonic()
        return False
    if not spark.catalog.tableExists(location):  # a hundredth of DESCRIBE DETAIL's second at a first look
        return False
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {location}").collect()
    except Exception as error:
        if _no_table(error):
            return False
        raise
    return bool(detail) and detail[0]["format"] == "delta"


def made_elsewhere(location: str) -> None:
    """Forget that ``location`` was found without a table, and what was read of its history:
    this process's Spark made or changed one there, outside the store (``declare``'s ``CREATE
    TABLE`` and ``ALTER TABLE``, a producer's append by Delta's writer)."""
    _ABSENT.pop(location, None)
    wrote(engine_session(location), table_name(location))


def engine_create_empty(location: str, schema: pa.Schema, storage_options: Mapping[str, str] | None = None) -> None:
    """Create an empty table at ``location``; raises if one is there."""
    # "error", not "errorifexists", which Spark Connect's client refuses (UNSUPPORTED_OPERATION)
    spark = engine_session(location)
    writer = _frame(spark, schema.empty_table()).write.format("delta").mode("error")
    _ABSENT.pop(location, None)
    forget(spark, table_name(location))
    save(writer, location)


def engine_append(location: str, rows: pa.Table, storage_options: Mapping[str, str] | None = None, *,
                  transaction: tuple[str, int] | None = None, user_metadata: str | None = None,
                  properties: Mapping[str, str] | None = None, merge_schema: bool = False) -> None:
    """Append ``rows`` at ``location`` in one commit (the table created if it is not there, with
    ``properties``: Delta takes ``delta.*`` ones as a new table's), under the app
    ``transaction``, with ``user_metadata`` naming it."""
    spark = engine_session(location)
    if not is_path(location):
        _create_named(spark, location, rows.schema, properties or {})
    writer = _frame(spark, rows).write.format("delta").mode("append")
    for key, value in (properties or {}).items():
        writer = writer.option(key, value)
    if transaction is not None:
        writer = writer.option("txnAppId", transaction[0]).option("txnVersion", str(transaction[1]))
    metadata = with_transaction(user_metadata, transaction)
    if metadata is not None:
        writer = writer.option("userMetadata", metadata)
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    _ABSENT.pop(location, None)
    try:
        _committed(lambda: save(writer, location))
    finally:
        wrote(spark, table_name(location))


def _create_named(spark: SparkSession, name: str, schema: pa.Schema, properties: Mapping[str, str]) -> None:
    """Make the catalog table ``name`` before its first append, unless made already: an append
    that creates a catalog table (a CTAS) leaves its ``userMetadata`` out of the commit, where
    commands and transactions are found."""
    if name in _NAMED:
        return
    if not spark.catalog.tableExists(name):
        from pyspark.sql.pandas.types import from_arrow_schema

        listed = ", ".join(f"{sql_string(key)} = {sql_string(value)}" for key, value in properties.items())
        ddl = from_arrow_schema(_nullable_strings(schema)).toDDL()
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({ddl}) USING delta"
                  + (f" TBLPROPERTIES ({listed})" if listed else ""))
    _NAMED.add(name)


def engine_drop(name: str) -> None:
    """Drop the catalog table ``name``, if there is one (a managed table's files go with it)."""
    spark = engine_session(name)
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    _NAMED.discard(name)
    forget(spark, name)


def _nullable_strings(schema: pa.Schema) -> pa.Schema:
    """``schema`` with null-typed fields as strings, as :func:`_frame` writes them."""
    import pyarrow as pa

    return pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in schema])


class EngineTable:
    """A Delta table at ``location`` read and written through the SparkSession (at its
    ``version``, or as new as :meth:`refresh` made it).

    Parameters
    ----------
    location : str
        A path, or a catalog table's name.
    storage_options : mapping, optional
        The process's storage options (``spark.flow.io``); the engine has its own credentials.
    version : int, optional
        The table as of this version, not caught up.
    """

    writes_newest = True

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None, *,
                 version: int | None = None) -> None:
        self.location = location
        self.storage_options = dict(storage_options or {})
        self._spark = engine_session(location)
        self._name = table_name(location)
        self._pinned = version
        self._history = history_of(self._spark, self._name)
        self._detail: tuple[int, dict[str, Any]] | None = None  # DESCRIBE DETAIL, as of a version
        self._schema: tuple[int, StructType] | None = None  # the table's schema, as of a version
        self._version = self._latest() if version is None else version
        self._transactions: dict[str, int] = {}  # app -> last txnVersion in the commits scanned
        self._scanned = -1  # the newest version whose commit info was scanned for transactions

    def _latest(self) -> int:
        try:
            return self._history.latest()
        except Exception as error:
            if _no_table(error):
                raise FileNotFoundError(f"no Delta table at {self.location}") from error
            raise

    def _reader(self) -> DataFrame:
        reader = self._spark.read.format("delta")
        if self._pinned is not None:
            reader = reader.option("versionAsOf", self._pinned)
        return load(reader, self.location)

    def version(self) -> int:
        return self._version

    def refresh(self) -> int:
        if self._pinned is None:
            self._version = self._latest()
        return self._version

    def _described(self) -> dict[str, Any]:
        """``DESCRIBE DETAIL``, read again only when a commit since may have changed the table's
        metadata: the operations of the commits between are known from the history this handle
        read (a queue's ledger reads every commit's), else read in one look."""
        if self._detail is None or (self._detail[0] != self._version and self._metadata_changed(self._detail[0])):
            row = self._spark.sql(f"DESCRIBE DETAIL {self._name}").collect()[0].asDict(recursive=True)
            self._detail = (self._version, row)
        return self._detail[1]

    def _metadata_changed(self, since: int) -> bool:
        """Whether a commit after version ``since`` (through this version) may change metadata."""
        versions = range(since + 1, self._version + 1)
        if any(version not in self._history.operations for version in versions):
            self._history.infos(since + 1, self._version)
        return any(self._history.operations.get(version) not in DATA_OPERATIONS for version in versions)

    def properties(self) -> dict[str, str]:
        return dict(self._described().get("properties") or {})

    def _struct(self) -> StructType:
        """The table's schema, read again unless every commit since is a producer's append of
        messages (``QueueSink``'s, which never evolves it): a producer checks each batch
        against it, and its own appends are most of a queue's commits."""
        if self._schema is None or (self._schema[0] != self._version and not all(
                commit_from_info(info).producer is not None
                for info in self._history.infos(self._schema[0] + 1, self._version))):
            self._schema = (self._version, self._reader().schema)
        return self._schema[1]

    def arrow_schema(self) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self._struct())

    def schema_json(self) -> str:
        return str(self._struct().json())

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txnVersion`` of ``app_id``, from the commit infos that name one: the whole
        history the first time, then only the commits since."""
        if self._scanned < self._version:
            for info in self._history.infos(self._scanned + 1, self._version):
                named = transaction_of(info)
                if named is not None:
                    self._transactions[named[0]] = max(named[1], self._transactions.get(named[0], -1))
            self._scanned = self._version
        return self._transactions.get(app_id)

    def has_commit(self, version: int) -> bool:
        """Whether commit ``version`` is in the log: the table's look that ended a moment ago
        answers (a look fails once the table is gone; one that took longer than
        :data:`FRESH_FOR` under load is not read again at once), else one look now."""
        if time.monotonic() - self._history.answered < FRESH_FOR and self._history.seen[1] >= version:
            return True
        try:
            return self._latest() >= version
        except FileNotFoundError:
            return False

    def commit_infos(self, first: int) -> list[dict[str, Any]]:
        """Through the version the handle last read: its callers have just refreshed it (the
        ledger, a command's author, a look at the status table), and each ``DESCRIBE HISTORY``
        costs about 0.15 s."""
        return self._history.infos(first, self._version)

    def changes(self, first: int, last: int) -> pa.Table:
        reader = (self._spark.read.format("delta").option("readChangeFeed", "true")
                  .option("startingVersion", first).option("endingVersion", last))
        return load(reader, self.location).toArrow()

    def rows(self, columns: Sequence[str] | None = None, where: str | None = None) -> list[dict[str, Any]]:
        frame = self._reader()
        if where:
            frame = frame.where(where)
        if columns:
            frame = frame.select(*[f"`{column}`" for column in columns])
        listed: list[dict[str, Any]] = frame.toArrow().to_pylist()
        for row in listed:
            for key, value in row.items():
                if hasattr(value, "tzinfo") and value.tzinfo is not None:
                    row[key] = value.astimezone(UTC)
        return listed

    def merge(self, rows: pa.Table, merge: Merge, *, merge_schema: bool = False) -> dict[str, Any]:
        update = update_sql(self._name, merge, rows.to_pylist()[0]) if rows.num_rows == 1 and not merge_schema else None
        if update is not None:
            [updated] = self._written(lambda: self._spark.sql(update).collect())
            return {"num_target_rows_updated": int(updated["num_affected_rows"]), "num_target_rows_inserted": 0,
                    "num_target_rows_deleted": 0}
        source = _frame(self._spark, rows)
        statement = merge_sql(self._name, merge, merge_schema=merge_schema)
        [metrics] = self._written(lambda: self._spark.sql(statement, s=source).collect())
        return {"num_target_rows_updated": int(metrics["num_updated_rows"]),
                "num_target_rows_inserted": int(metrics["num_inserted_rows"]),
                "num_target_rows_deleted": int(metrics["num_deleted_rows"])}

    def delete(self, predicate: str) -> None:
        self._written(lambda: self._spark.sql(f"DELETE FROM {self._name} WHERE {predicate}").collect())

    def add_columns(self, columns: Mapping[str, str]) -> None:
        names = set(self._reader().columns)
        missing = [f"`{name}` {kind}" for name, kind in columns.items() if name not in names]
        if missing:
            self._written(lambda: self._spark.sql(f"ALTER TABLE {self._name} ADD COLUMNS ({', '.join(missing)})").collect())

    def append(self, rows: pa.Table, *, transaction: tuple[str, int] | None = None,
               user_metadata: str | None = None, merge_schema: bool = False) -> None:
        engine_append(self.location, rows, self.storage_options, transaction=transaction, user_metadata=user_metadata,
                      merge_schema=merge_schema)

    def set_properties(self, properties: Mapping[str, str]) -> None:
        listed = ", ".join(f"{sql_string(key)} = {sql_string(value)}" for key, value in properties.items())
        self._written(lambda: self._spark.sql(f"ALTER TABLE {self._name} SET TBLPROPERTIES ({listed})").collect())

    def _written(self, write: Callable[[], Any]) -> Any:
        """Run a write of this table (:func:`_committed`); its next look reads the history again."""
        try:
            return _committed(write)
        finally:
            self._history.written()

    def live_files(self) -> dict[str, tuple[int, int]]:
        raise purge_refused()  # a purge's reading: it cannot commit what it would find

    def remove_files(self, files: Mapping[str, int], *, transaction: tuple[str, int], user_metadata: str) -> None:
        raise purge_refused()


def purge_refused() -> ConfigurationError:
    """A purge through the engine: Spark SQL has no removal of files that change feeds skip."""
    return ConfigurationError(IO_OPTION, "engine", "deltalake for a purge: Spark SQL has no removal of files that "
                              "change feeds skip (dataChange=false); run purge_acknowledged where this Python "
                              "reaches the storage")
