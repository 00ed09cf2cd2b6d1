"""The small Delta tables spark-flow keeps its state in (:class:`RecordTable`), and the queue that owns them.

Subscriptions, transitions, run-time settings, the home's registry, commands, status and
history are each a Delta table beside the queues: atomic on any storage Delta supports, and
written without a SparkSession (they are written in Python data source workers, the CLI and
the controller's sink). Every change is an append or a MERGE whose predicate makes a replayed
or raced change harmless (:class:`~spark_flow.store.table.Merge`); a commit that loses a race
is built again on a fresh snapshot. The first writer creates the table; one that loses that race merges into the
table the winner created.

A queue's tables are written only while the queue's own table is there (:class:`Owner`): once a
queue is deleted, nothing writes its state again, so nothing is recreated in its place.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from spark_flow.exceptions import ConfigurationError, QueueNotFoundError
from spark_flow.store.access import remove_location
from spark_flow.store.table import Merge, Table, append, create_empty, find_table, retry_commit

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")


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
    This is the one rule for "the queue is gone": the newest commit this process read of the
    queue's table is no longer in its log (:meth:`Table.has_commit`, one request).

    Parameters
    ----------
    queue : str
        The queue's name, for the error.
    table : Table
        The queue's table, as this process last read it.
    state_location : str
        Where the queue's own tables live (``<home>/<queue>``, ``<queue>/_flow``).
    """

    def __init__(self, queue: str, table: Table, state_location: str) -> None:
        self.queue, self.table, self.state_location = queue, table, state_location
        self.path = table.location

    def exists(self) -> bool:
        """Whether the queue's table still has the newest commit this process read."""
        return self.table.has_commit(self.table.version())

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

    def write(self, action: Callable[[], T]) -> T:
        """Run a write of the queue's (its table or its state), only while the queue is there. A
        write that fails because the queue was deleted meanwhile leaves nothing: what it wrote
        is removed, and it raises :class:`QueueNotFoundError`."""
        self.require()
        try:
            return action()
        except Exception as error:
            if self.exists():
                raise
            self.clear()
            raise self.gone() from error

    def clear(self) -> None:
        """Remove what a write that raced the queue's deletion left at the queue's location and
        in its state location (where spark-flow can remove files: not on ``hdfs://``)."""
        for location in (self.path, self.state_location):
            with contextlib.suppress(ConfigurationError):
                remove_location(location, self.table.storage_options)


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
        self._table: Table | None = None

    def open(self) -> Table | None:
        """The table as of now, None while nobody has created it."""
        if self._table is not None:
            self._table.refresh()
        else:
            self._table = find_table(self.location, self.storage_options)
        return self._table

    def _to_write(self) -> Table | None:
        """The table to write to: the open handle as it is where its writes go to the newest
        version anyway (the engine's: no read of the table's history first), else caught up."""
        if self._table is not None and self._table.writes_newest:
            return self._table
        return self.open()

    def rows(self, columns: list[str] | None = None, where: str | None = None) -> list[dict[str, Any]]:
        """Every row (of ``columns``, matching ``where``), none while the table does not exist."""
        table = self.open()
        return [] if table is None else table.rows(columns, where)

    def create(self, schema: pa.Schema) -> bool:
        """Create the table, empty, with ``schema``; False if it exists (another process may have
        created it a moment ago). Empty, because two creators racing may both succeed: delta-rs
        retries the losing creation as an append, so rows written with it would be there twice
        (two empty commits are one empty table); rows go in by :meth:`merge`. A handle the
        engine writes through was opened on a table that was there: no read to ask again."""
        if self._to_write() is not None:
            return False
        try:
            self._written(lambda: create_empty(self.location, schema, self.storage_options))
            return True
        except QueueNotFoundError:
            raise
        except Exception:
            if self.open() is None:  # not the race: a real failure
                raise
            return False

    def merge(self, rows: pa.Table, merge: Merge, *, merge_schema: bool = False) -> dict[str, Any]:
        """MERGE ``rows`` into the table; return Delta's metrics. ``merge_schema`` adds the
        columns the clauses write that the table lacks (a table an older spark-flow created)."""

        def attempt() -> dict[str, Any]:
            table = self._to_write()
            if table is None:
                raise FileNotFoundError(f"no Delta table at {self.location}")
            return table.merge(rows, merge, merge_schema=merge_schema)

        return self._written(lambda: retry_commit(attempt))

    def delete(self, predicate: str) -> None:
        """Delete the rows matching ``predicate``."""
        def attempt() -> None:
            table = self._to_write()
            if table is not None:
                table.delete(predicate)

        self._written(lambda: retry_commit(attempt))

    def add_columns(self, columns: Mapping[str, str]) -> None:
        """Add the nullable columns (name -> Delta primitive type) the table lacks: a table an
        older spark-flow created."""
        def attempt() -> None:
            table = self._to_write()
            if table is not None:
                table.add_columns(columns)

        self._written(lambda: retry_commit(attempt))

    def append(self, rows: pa.Table, *, transaction: tuple[str, int] | None = None, merge_schema: bool = False,
               properties: Mapping[str, str] | None = None) -> None:
        """Append ``rows`` in one commit (the table created by it, with ``properties``, if it is not
        there), under the app ``transaction``."""
        table = self.open()
        if table is None:
            self._written(lambda: append(self.location, rows, self.storage_options, transaction=transaction,
                                         merge_schema=merge_schema, properties=properties))
        else:
            self._written(lambda: table.append(rows, transaction=transaction, merge_schema=merge_schema))

    def upsert(self, rows: pa.Table, merge: Merge) -> None:
        """MERGE ``rows`` into the table, created first if it is not there yet."""
        self.create(rows.schema)
        self.merge(rows, merge)

    def _written(self, write: Callable[[], T]) -> T:
        """Run a write of the table, only while its owner's queue is there (:meth:`Owner.write`)."""
        return write() if self.owner is None else self.owner.write(write)
