"""The small Delta tables spark-flow keeps its state in, written with ``deltalake``.

Subscriptions, transitions, run-time settings, the home's registry, commands, status and
history are each a Delta table beside the queues: atomic on any storage Delta supports, and
written without a SparkSession (they are written in Python data source workers, the CLI and
the controller's sink). Every change is an append or a MERGE whose predicate makes a replayed
or raced change harmless; a commit that loses a race (``CommitFailedError``) is built again on
a fresh snapshot. The first writer creates the table; one that loses that race merges into the
table the winner created.

A queue's tables are written only while the queue's own table is there (:class:`Owner`): once a
queue is deleted, nothing writes its state again, so nothing is recreated in its place.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from spark_flow.exceptions import ConfigurationError, QueueNotFoundError
from spark_flow.store.access import named_access_errors, remove_location

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.table import TableMerger

T = TypeVar("T")

_RETRIES = 50


def retry_commit(action: Callable[[], T]) -> T:
    """Run a Delta commit, again on a fresh snapshot while a concurrent commit conflicts with it."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(_RETRIES):
        try:
            return action()
        except CommitFailedError:
            time.sleep(min(0.01 * 2**attempt, 0.5))
    return action()


def sql_string(text: str) -> str:
    """A string literal in a deltalake (DataFusion) predicate: a quote is doubled. Spark SQL
    reads ``''`` as two literals run together, so Spark statements use :func:`spark_sql_string`."""
    return "'" + text.replace("'", "''") + "'"


def spark_sql_string(text: str) -> str:
    """A string literal in a Spark SQL statement: a quote is escaped with a backslash."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def read_rows(table: DeltaTable, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Every row of a small Delta table (of ``columns``), read with deltalake's DataFusion
    query engine: 2 ms for a subscriptions table, where ``to_pyarrow_table`` (through
    ``pyarrow.dataset``) takes 5 ms, and a gate or source reads one again at each new version."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    result = QueryBuilder().register("t", table).execute(f"SELECT {selected} FROM t")
    rows = pa.RecordBatchReader.from_stream(result).read_all()
    # pyarrow makes a zoned timestamp's datetime only after importing pandas (0.2-0.4 s the
    # first time, in a source process Spark starts afresh for each query): read the UTC wall
    # time (a zero-copy view: no compute kernels to import either) and put the zone back here.
    zoned = [f for f in rows.schema if pa.types.is_timestamp(f.type) and f.type.tz]
    for zoned_field in zoned:
        wall = pa.timestamp(zoned_field.type.unit)
        chunks = [chunk.view(wall) for chunk in rows.column(zoned_field.name).chunks]
        rows = rows.set_column(rows.schema.get_field_index(zoned_field.name), zoned_field.with_type(wall),
                               pa.chunked_array(chunks, wall))
    listed: list[dict[str, Any]] = rows.to_pylist()
    for row in listed:
        for zoned_field in zoned:
            if row[zoned_field.name] is not None:
                row[zoned_field.name] = row[zoned_field.name].replace(tzinfo=UTC)
    return listed


def one_row(row: Mapping[str, Any]) -> pa.Table:
    """``row`` as a one-row Arrow table, the source of a MERGE keyed on it: str, int, bool,
    timezone-aware datetime (as UTC) or None values.

    Built by pyarrow's JSON reader, not ``pa.Table.from_pylist``: pyarrow imports pandas to
    build any array from Python objects (0.2-0.4 s the first time, in a source process Spark
    starts afresh for each query).
    """
    import pyarrow as pa
    from pyarrow import json as arrow_json

    schema = pa.schema([pa.field(name, _arrow_type(name, value)) for name, value in row.items()])
    text = json.dumps({k: v.astimezone(UTC).isoformat() if isinstance(v, datetime) else v for k, v in row.items()})
    return arrow_json.read_json(io.BytesIO(text.encode()), parse_options=arrow_json.ParseOptions(explicit_schema=schema))


def _arrow_type(name: str, value: Any) -> pa.DataType:
    """The Arrow type ``pa.Table.from_pylist`` would give ``value``."""
    import pyarrow as pa

    if value is None:
        return pa.null()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, datetime) and value.tzinfo is not None:
        return pa.timestamp("us", tz="UTC")
    raise TypeError(f"{name}={value!r}: a one-row table holds str, int, bool, timezone-aware datetime or None")


class Owner:
    """The queue whose state a table holds: its tables are written only while the queue's table
    is there. A write into a deleted queue's state (a held producer stopped after the deletion
    recording its hold, a consumer's last acknowledgement, a table created at first use) would
    recreate files in the queue's place; :class:`RecordTable` asks :meth:`require` before each.

    The check is one request: is the newest commit this process read (``version()``, the
    queue's handle) still in the log? Delta never cleans up a table's newest commit, and a
    table deleted and made again at the same path starts its log over.

    Parameters
    ----------
    queue : str
        The queue's name, for the error.
    path : str
        The queue table's location.
    state_location : str
        Where the queue's own tables live (``<home>/<queue>``, ``<queue>/_flow``).
    version : callable
        The queue's newest version this process has read.
    storage_options : mapping, optional
    """

    def __init__(self, queue: str, path: str, state_location: str, version: Callable[[], int],
                 storage_options: Mapping[str, str] | None = None) -> None:
        self.queue, self.path, self.state_location = queue, path, state_location
        self.storage_options = dict(storage_options or {})
        self._version = version
        self._files: Any = None  # deltalake's file system on the table, made at the first look

    def exists(self) -> bool:
        """Whether the queue's table still has the newest commit this process read."""
        from deltalake.exceptions import TableNotFoundError
        from deltalake.fs import DeltaStorageHandler
        from pyarrow.fs import FileType

        try:
            if self._files is None:
                self._files = DeltaStorageHandler(self.path, self.storage_options or None)
        except TableNotFoundError:  # a local directory that is gone
            return False
        commit = f"_delta_log/{self._version():020d}.json"
        return bool(self._files.get_file_info([commit])[0].type != FileType.NotFound)

    def require(self) -> None:
        """Raise :class:`QueueNotFoundError` naming the queue once its table is gone."""
        if not self.exists():
            raise self.gone()

    @contextlib.contextmanager
    def failing_as_gone(self) -> Iterator[None]:
        """A failure while the queue's table is gone is its deletion, whatever step it hit (a
        deltalake read of a log being removed fails ``File not found``): raised as
        :class:`QueueNotFoundError` naming the queue. Looks only when something failed."""
        try:
            yield
        except QueueNotFoundError:
            raise
        except Exception as error:
            if self.exists():
                raise
            raise self.gone() from error

    def gone(self) -> QueueNotFoundError:
        return QueueNotFoundError(self.queue, f"its table at {self.path} is gone (deleted, dropped, or its "
                                              "directory removed)")

    def clear(self) -> None:
        """Remove what a write that raced the queue's deletion left at the queue's location and
        in its state location (where spark-flow can remove files: not on ``hdfs://``)."""
        for location in (self.path, self.state_location):
            with contextlib.suppress(ConfigurationError):
                remove_location(location, self.storage_options)


class RecordTable:
    """One state table at ``location``; the handle is kept and caught up, not reopened.

    Parameters
    ----------
    location : str
    storage_options : mapping, optional
        deltalake storage options (object store credentials).
    owner : Owner, optional
        The queue the table belongs to: the table is written only while that queue is there.
    """

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None, *,
                 owner: Owner | None = None) -> None:
        self.location = location
        self.storage_options = dict(storage_options or {})
        self.owner = owner
        self._table: DeltaTable | None = None

    def open(self) -> DeltaTable | None:
        """The table as of now, None while nobody has created it."""
        from deltalake import DeltaTable

        if self._table is not None:
            self._table.update_incremental()
        else:
            with named_access_errors(self.location, self.storage_options):
                if DeltaTable.is_deltatable(self.location, storage_options=self.storage_options or None):
                    self._table = DeltaTable(self.location, storage_options=self.storage_options or None)
        return self._table

    def rows(self, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """Every row (of ``columns``), none while the table does not exist."""
        table = self.open()
        return [] if table is None else read_rows(table, columns)

    def create(self, schema: pa.Schema) -> bool:
        """Create the table, empty, with ``schema``; False if it exists (another process may have
        created it a moment ago). Empty, because two creators racing may both succeed: delta-rs
        retries the losing creation as an append, so rows written with it would be there twice
        (two empty commits are one empty table); rows go in by :meth:`merge`."""
        from deltalake import write_deltalake

        if self.open() is not None:
            return False
        try:
            self._written(lambda: write_deltalake(self.location, schema.empty_table(), mode="error",
                                                  storage_options=self.storage_options or None))
            return True
        except QueueNotFoundError:
            raise
        except Exception:
            if self.open() is None:  # not the race: a real failure
                raise
            return False

    def merge(self, rows: pa.Table, predicate: str, clauses: Callable[[TableMerger], TableMerger], *,
              merge_schema: bool = False) -> dict[str, Any]:
        """MERGE ``rows`` (alias ``s``) into the table (alias ``t``); return Delta's metrics.
        ``merge_schema`` adds the columns the clauses write that the table lacks (a table an
        older spark-flow created)."""

        def attempt() -> dict[str, Any]:
            table = self.open()
            if table is None:
                raise FileNotFoundError(f"no Delta table at {self.location}")
            merger = table.merge(rows, predicate=predicate, source_alias="s", target_alias="t",
                                 merge_schema=merge_schema)
            return clauses(merger).execute()

        return self._written(lambda: retry_commit(attempt))

    def delete(self, predicate: str) -> None:
        """Delete the rows matching ``predicate``."""
        def attempt() -> None:
            table = self.open()
            if table is not None:
                table.delete(predicate)

        self._written(lambda: retry_commit(attempt))

    def add_columns(self, columns: Mapping[str, str]) -> None:
        """Add the nullable columns (name -> deltalake primitive type) the table lacks: a table
        an older spark-flow created."""
        from deltalake.schema import Field, PrimitiveType

        def attempt() -> None:
            table = self.open()
            names = table.schema().to_arrow().names if table is not None else []
            fields = [Field(name, PrimitiveType(kind), nullable=True) for name, kind in columns.items() if name not in names]
            if table is not None and fields:
                table.alter.add_columns(fields)

        self._written(lambda: retry_commit(attempt))

    def upsert(self, rows: pa.Table, predicate: str, clauses: Callable[[TableMerger], TableMerger]) -> None:
        """MERGE ``rows`` into the table, created first if it is not there yet."""
        self.create(rows.schema)
        self.merge(rows, predicate, clauses)

    def _written(self, write: Callable[[], T]) -> T:
        """Run a write of the table, only while its owner's queue is there. A write that fails
        because the queue was deleted meanwhile leaves nothing: what it wrote is removed."""
        if self.owner is None:
            return write()
        self.owner.require()
        try:
            return write()
        except Exception as error:
            if self.owner.exists():
                raise
            self.owner.clear()
            raise self.owner.gone() from error
