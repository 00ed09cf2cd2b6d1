"""One Delta table as spark-flow reads and writes it: the store's interface, and the choice of
its implementation.

Everything above the store reads a table through :class:`Table` and this module's functions:
rows, a MERGE described by :class:`Merge` (its predicate the compare-and-set), an append once
under an app transaction (``txnAppId``/``txnVersion``) with the commit's metadata, commit infos
and change data between versions, table properties, whether a table (or one of its commits) is
there. Two implementations (docs/design.md 2.10): ``deltalake`` in this Python
(:mod:`~spark_flow.store.lake`) and the engine, the SparkSession at hand
(:mod:`~spark_flow.store.engine`), chosen per location by ``spark.flow.io``
(:mod:`~spark_flow.store.io`). Predicates are written in the SQL both speak (``t.a = s.a``,
``coalesce``, string literals by :func:`sql_string`). A commit that loses a race is built again
on a fresh snapshot (:func:`retry_commit`, the one retry of the package).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from spark_flow.rules.columns import Column
from spark_flow.store.io import uses_engine

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

_RETRIES = 50

#: Every column of the source row, as a MERGE clause's assignments.
ALL: Literal["*"] = "*"


def retry(action: Callable[[], T], conflicts: tuple[type[Exception], ...], *, attempts: int = _RETRIES,
          delay: float = 0.01, longest: float = 0.5, said: Callable[[Exception], None] | None = None) -> T:
    """Run a write, again after a growing pause (``delay`` doubled each time, at most ``longest``)
    while it fails with one of ``conflicts``, ``attempts`` times; the last failure raises.
    ``said`` hears each conflict."""
    for attempt in range(attempts):
        try:
            return action()
        except conflicts as error:
            if said is not None:
                said(error)
            time.sleep(min(delay * 2**attempt, longest))
    return action()


class CommitConflict(Exception):
    """A commit the engine refused because another landed first (Delta's concurrent
    modification exceptions, as either kind of client raises them): built again on a fresh snapshot."""


def retry_commit(action: Callable[[], T]) -> T:
    """Run a Delta commit, again on a fresh snapshot while a concurrent commit conflicts with it."""
    from deltalake.exceptions import CommitFailedError

    return retry(action, (CommitFailedError, CommitConflict))


#: The key of a commit's ``userMetadata`` that names its app transaction: Spark SQL shows no
#: ``txn`` action, so the engine finds a transaction's last version in the commit infos.
TRANSACTION_KEY = "spark_flow_txn"


def with_transaction(user_metadata: str | None, transaction: tuple[str, int] | None) -> str | None:
    """A commit's ``userMetadata`` naming its app ``transaction`` too (a JSON object's entry;
    metadata of another form is left as it is)."""
    if transaction is None:
        return user_metadata
    try:
        parsed = json.loads(user_metadata) if user_metadata else {}
    except ValueError:
        return user_metadata
    if not isinstance(parsed, dict):
        return user_metadata
    return json.dumps({**parsed, TRANSACTION_KEY: [transaction[0], int(transaction[1])]})


def transaction_of(info: Mapping[str, Any]) -> tuple[str, int] | None:
    """The app transaction a commit info's ``userMetadata`` names (:func:`with_transaction`)."""
    try:
        parsed = json.loads(info.get("userMetadata") or "")
    except ValueError:
        return None
    found = parsed.get(TRANSACTION_KEY) if isinstance(parsed, dict) else None
    return (str(found[0]), int(found[1])) if isinstance(found, list) and len(found) == 2 else None


def sql_string(text: str) -> str:
    """A string literal in a store predicate: a quote doubled, which DataFusion's SQL and Spark
    SQL (4.x) both read as one quote."""
    return "'" + text.replace("'", "''") + "'"


def arrow_fields(columns: Iterable[Column], *, nullable: bool | None = None) -> list[pa.Field]:
    """Declared columns as Arrow fields (``nullable`` overriding theirs)."""
    import pyarrow as pa

    types = {"string": pa.string(), "bigint": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC"), "binary": pa.binary()}
    return [pa.field(c.name, types[c.kind], nullable=c.nullable if nullable is None else nullable) for c in columns]



@dataclass(frozen=True)
class Merge:
    """A MERGE of source rows (alias ``s``) into a table (alias ``t``): rows matching ``on`` are
    updated with ``update`` (column -> expression, or :data:`ALL`) where ``update_when`` holds;
    the others inserted with ``insert``. A predicate that holds only for the state a writer read
    makes it a compare-and-set: the metrics say whether it took."""

    on: str
    update: Mapping[str, str] | Literal["*"] | None = None
    update_when: str | None = None
    insert: Mapping[str, str] | Literal["*"] | None = None


class Table(Protocol):
    """A Delta table at ``location`` (at its ``version``, or as new as :meth:`refresh` made it)."""

    location: str
    storage_options: dict[str, str]
    #: Whether its writes (merge, delete, add_columns) apply to the table's newest version
    #: whatever version it was read at: the engine's statements do, so a write needs no refresh
    #: first; deltalake's start from the version read, so one there would conflict and retry.
    writes_newest: bool

    def version(self) -> int:
        """The version as of the last refresh."""

    def refresh(self) -> int:
        """Catch up with the table's log; return its latest version."""

    def properties(self) -> dict[str, str]:
        """The table's properties."""

    def arrow_schema(self) -> pa.Schema:
        """The table's columns as Arrow."""

    def schema_json(self) -> str:
        """The table's schema as the Delta log records it (Spark's JSON form)."""

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txnVersion`` committed by ``app_id`` (as of the last refresh), or None."""

    def has_commit(self, version: int) -> bool:
        """Whether commit ``version`` is still in the log: Delta never cleans up a table's
        newest commit, and a table made again at the same path starts its log over."""

    def commit_infos(self, first: int) -> list[dict[str, Any]]:
        """The commit infos from version ``first`` through at least the version the handle last
        read, newest first (``version``, ``timestamp`` in ms, ``operation``, ``operationMetrics``,
        ``userMetadata``)."""

    def changes(self, first: int, last: int) -> pa.Table:
        """The change data of versions ``first`` through ``last`` (``_change_type``,
        ``_commit_version``, ``_commit_timestamp``)."""

    def rows(self, columns: Sequence[str] | None = None, where: str | None = None) -> list[dict[str, Any]]:
        """Every row (of ``columns``, matching the predicate ``where``), timestamps in UTC."""

    def merge(self, rows: pa.Table, merge: Merge, *, merge_schema: bool = False) -> dict[str, Any]:
        """MERGE ``rows`` into the table; the metrics ``num_target_rows_updated`` and
        ``num_target_rows_inserted``. ``merge_schema`` adds the columns the clauses write that
        the table lacks."""

    def delete(self, predicate: str) -> None:
        """Delete the rows matching ``predicate``."""

    def add_columns(self, columns: Mapping[str, str]) -> None:
        """Add the nullable columns (name -> Delta primitive type) the table lacks."""

    def append(self, rows: pa.Table, *, transaction: tuple[str, int] | None = None,
               user_metadata: str | None = None, merge_schema: bool = False) -> None:
        """Append ``rows`` in one commit (a concurrent commit in conflict fails it: retry)."""

    def set_properties(self, properties: Mapping[str, str]) -> None:
        """Set table properties."""

    def live_files(self) -> dict[str, tuple[int, int]]:
        """The table's data files at this version: path -> (bytes, rows)."""

    def remove_files(self, files: Mapping[str, int], *, transaction: tuple[str, int], user_metadata: str) -> None:
        """Commit the removal of ``files`` (path -> bytes) with ``dataChange=false``."""


def open_table(location: str, storage_options: Mapping[str, str] | None = None, *,
               version: int | None = None) -> Table:
    """The table at ``location``, read the way this process reaches it (:mod:`spark_flow.store.io`)."""
    if uses_engine(location, storage_options):
        from spark_flow.store.engine import EngineTable

        return EngineTable(location, storage_options, version=version)
    from spark_flow.store.lake import LakeTable

    return LakeTable(location, storage_options, version=version)


def find_table(location: str, storage_options: Mapping[str, str] | None = None) -> Table | None:
    """The table at ``location``, None while there is none."""
    return open_table(location, storage_options) if is_table(location, storage_options) else None


def is_table(location: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Whether a Delta table is at ``location``; a failure to reach it names what is missing."""
    if uses_engine(location, storage_options):
        from spark_flow.store.engine import engine_is_table

        return engine_is_table(location, storage_options)
    from spark_flow.store.lake import lake_is_table

    return lake_is_table(location, storage_options)


def create_empty(location: str, schema: pa.Schema, storage_options: Mapping[str, str] | None = None) -> None:
    """Create an empty table at ``location``; raises if one is there."""
    if uses_engine(location, storage_options):
        from spark_flow.store.engine import engine_create_empty

        engine_create_empty(location, schema, storage_options)
        return
    from spark_flow.store.lake import lake_create_empty

    lake_create_empty(location, schema, storage_options)


def append(location: str, rows: pa.Table, storage_options: Mapping[str, str] | None = None, *,
           transaction: tuple[str, int] | None = None, user_metadata: str | None = None,
           properties: Mapping[str, str] | None = None, merge_schema: bool = False) -> None:
    """Append ``rows`` at ``location`` in one commit (the table created if it is not there, with
    ``properties``), under the app ``transaction`` (``txnAppId``, ``txnVersion``), with
    ``user_metadata``; ``merge_schema`` adds the columns the table lacks."""
    if uses_engine(location, storage_options):
        from spark_flow.store.engine import engine_append

        engine_append(location, rows, storage_options, transaction=transaction, user_metadata=user_metadata,
                      properties=properties, merge_schema=merge_schema)
        return
    from spark_flow.store.lake import lake_append

    lake_append(location, rows, storage_options, transaction=transaction, user_metadata=user_metadata,
                properties=properties, merge_schema=merge_schema)


def write_and_read(location: str, storage_options: Mapping[str, str] | None = None) -> int:
    """Write a one-row table at ``location`` and read it back (a probe of the storage); the rows
    read. A failure to reach the storage names what is missing."""
    import pyarrow as pa

    from spark_flow.store.access import named_access_errors

    with named_access_errors(location, storage_options or {}):
        append(location, pa.table({"probe": [1]}), storage_options)
        return len(open_table(location, storage_options).rows())
