"""One Delta table read and written with ``deltalake`` in this Python (``spark.flow.io`` deltalake,
or auto where this Python reaches the storage): fast, no JVM, the storage's credentials in this
process. The store's other way is the engine's (:mod:`spark_flow.store.engine`); both are the
interface :mod:`spark_flow.store.table` names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

from spark_flow.store.access import named_access_errors
from spark_flow.store.io import deltalake_options
from spark_flow.store.table import ALL, Merge, with_transaction

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.table import TableMerger


#: The longest a handle goes without deltalake's whole catch-up (:meth:`LakeTable.refresh`).
FULL_CATCH_UP_SECONDS = 60.0


def lake_is_table(location: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Whether a Delta table is at ``location``; a failure to reach it names what is missing."""
    from deltalake import DeltaTable

    with named_access_errors(location, storage_options or {}):
        return bool(DeltaTable.is_deltatable(location, storage_options=deltalake_options(storage_options)))


def lake_create_empty(location: str, schema: pa.Schema, storage_options: Mapping[str, str] | None = None) -> None:
    """Create an empty table at ``location``; raises if one is there."""
    from deltalake import write_deltalake

    write_deltalake(location, schema.empty_table(), mode="error", storage_options=deltalake_options(storage_options))


def lake_append(location: str, rows: pa.Table, storage_options: Mapping[str, str] | None = None, *,
                transaction: tuple[str, int] | None = None, user_metadata: str | None = None,
                properties: Mapping[str, str] | None = None, merge_schema: bool = False) -> None:
    """Append ``rows`` at ``location`` in one commit (the table created if it is not there, with
    ``properties``), under the app ``transaction`` (``txnAppId``, ``txnVersion``), with
    ``user_metadata`` (naming the transaction too); ``merge_schema`` adds the columns the
    table lacks."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    user_metadata = with_transaction(user_metadata, transaction)
    custom = {"userMetadata": user_metadata} if user_metadata is not None else None
    committed = CommitProperties(custom_metadata=custom,
                                 app_transactions=[Transaction(*transaction)] if transaction else None)
    write_deltalake(location, rows, mode="append", schema_mode="merge" if merge_schema else None,
                    configuration=dict(properties) if properties else None, commit_properties=committed,
                    storage_options=deltalake_options(storage_options))


def _clauses(merge: Merge, merger: TableMerger) -> TableMerger:
    """A :class:`Merge`'s clauses on deltalake's merger."""
    if merge.update == ALL:
        merger = merger.when_matched_update_all(predicate=merge.update_when)
    elif merge.update is not None:
        merger = merger.when_matched_update(dict(merge.update), predicate=merge.update_when)
    if merge.insert == ALL:
        merger = merger.when_not_matched_insert_all()
    elif merge.insert is not None:
        merger = merger.when_not_matched_insert(dict(merge.insert))
    return merger


class LakeTable:
    """A Delta table at ``location`` (at its ``version``, or as new as :meth:`refresh` made it).

    Parameters
    ----------
    location : str
    storage_options : mapping, optional
        deltalake storage options (object store credentials).
    version : int, optional
        The table as of this version, not caught up.
    """

    writes_newest = False

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None, *,
                 version: int | None = None) -> None:
        from deltalake import DeltaTable

        self.location = location
        self.storage_options = dict(storage_options or {})
        self._delta: DeltaTable = DeltaTable(location, version=version, storage_options=deltalake_options(storage_options))
        self._files: Any = None  # deltalake's file system on the table, made at the first look at a commit
        self._caught_up = time.monotonic()  # when deltalake last read the log folder

    @classmethod
    def find(cls, location: str, storage_options: Mapping[str, str] | None = None) -> LakeTable | None:
        """The table at ``location``, None while there is none."""
        if not lake_is_table(location, storage_options):
            return None
        with named_access_errors(location, storage_options or {}):
            return cls(location, storage_options)

    def version(self) -> int:
        """The version as of the last refresh."""
        return int(self._delta.version())

    def refresh(self) -> int:
        """Catch up with the table's log; return its latest version.

        A table with no commit after the handle's version reads nothing more: Delta writes
        commit n + 1 only as its file, so one request for that file says whether anything
        changed, where deltalake's catch-up lists the log folder (on a local disk 0.5 ms against
        a stat's 0.002: most of a controller's look at 10,000 queues). Log cleanup removes only
        commits older than its retention (30 days by default), so a handle caught up in full at
        least every :data:`FULL_CATCH_UP_SECONDS` never misses a commit cleaned up behind it."""
        if time.monotonic() - self._caught_up < FULL_CATCH_UP_SECONDS and not self.has_commit(self.version() + 1):
            return self.version()
        self._caught_up = time.monotonic()
        self._delta.update_incremental()
        return self.version()

    def properties(self) -> dict[str, str]:
        return dict(self._delta.metadata().configuration)

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema(self._delta.schema().to_arrow())

    def schema_json(self) -> str:
        """The table's schema as the Delta log records it (Spark's JSON form)."""
        return str(self._delta.schema().to_json())

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txnVersion`` committed by ``app_id`` (as of the last refresh), or None."""
        done = self._delta.transaction_version(app_id)
        return None if done is None else int(done)

    def has_commit(self, version: int) -> bool:
        """Whether commit ``version`` is still in the log (one request): Delta never cleans up a
        table's newest commit, and a table made again at the same path starts its log over."""
        from deltalake.exceptions import TableNotFoundError
        from deltalake.fs import DeltaStorageHandler
        from pyarrow.fs import FileType

        commit = f"_delta_log/{version:020d}.json"
        if "://" not in self.location:  # a local path: a stat, where deltalake's handler costs 30 of them
            return os.path.isfile(os.path.join(self.location, commit))
        try:
            if self._files is None:
                self._files = DeltaStorageHandler(self.location, deltalake_options(self.storage_options))
        except TableNotFoundError:  # a location that is gone
            return False
        return bool(self._files.get_file_info([commit])[0].type != FileType.NotFound)

    def commit_infos(self, first: int) -> list[dict[str, Any]]:
        """The commit infos from version ``first`` on, newest first (``version``, ``timestamp``, ``operation``,
        ``operationMetrics``, ``userMetadata`` and the writer's own entries). deltalake's
        ``history(n)`` reads the newest n commits in storage but numbers them from the handle's
        loaded version (deltalake 1.6.6): with a commit landed since the handle's last refresh,
        every one would carry the number of the commit before it. So it is read again until the
        handle was the newest before and after the read."""
        while True:
            newest = self.version()
            infos = self._delta.history(newest - first + 1)
            if self.refresh() == newest:
                return [dict(info) for info in infos]

    def changes(self, first: int, last: int) -> pa.Table:
        """The change data of versions ``first`` through ``last`` (``_change_type``,
        ``_commit_version``, ``_commit_timestamp``), as deltalake reads it (view types)."""
        import pyarrow as pa

        return pa.table(self._delta.load_cdf(starting_version=first, ending_version=last))

    def rows(self, columns: Sequence[str] | None = None, where: str | None = None) -> list[dict[str, Any]]:
        """Every row (of ``columns``, matching the predicate ``where``), read with deltalake's
        DataFusion query engine: 2 ms for a subscriptions table, where ``to_pyarrow_table``
        (through ``pyarrow.dataset``) takes 5 ms, and a gate or source reads one again at each
        new version."""
        import pyarrow as pa
        from deltalake import QueryBuilder

        selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
        query = f"SELECT {selected} FROM t" + (f" WHERE {where}" if where else "")
        rows = pa.RecordBatchReader.from_stream(QueryBuilder().register("t", self._delta).execute(query)).read_all()
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

    def merge(self, rows: pa.Table, merge: Merge, *, merge_schema: bool = False) -> dict[str, Any]:
        """MERGE ``rows`` into the table; Delta's metrics. ``merge_schema`` adds the columns the
        clauses write that the table lacks."""
        merger = self._delta.merge(rows, predicate=merge.on, source_alias="s", target_alias="t",
                                   merge_schema=merge_schema)
        return dict(_clauses(merge, merger).execute())

    def delete(self, predicate: str) -> None:
        self._delta.delete(predicate)

    def add_columns(self, columns: Mapping[str, str]) -> None:
        """Add the nullable columns (name -> Delta primitive type) the table lacks."""
        from deltalake.schema import Field, PrimitiveType

        names = self._delta.schema().to_arrow().names
        fields = [Field(name, PrimitiveType(kind), nullable=True) for name, kind in columns.items() if name not in names]
        if fields:
            self._delta.alter.add_columns(fields)

    def append(self, rows: pa.Table, *, transaction: tuple[str, int] | None = None,
               user_metadata: str | None = None, merge_schema: bool = False) -> None:
        """Append ``rows`` in one commit to this table as of its last refresh (a concurrent
        commit in conflict fails it: retry on a fresh snapshot)."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        user_metadata = with_transaction(user_metadata, transaction)
        write_deltalake(self._delta, rows, mode="append", schema_mode="merge" if merge_schema else None,
                        commit_properties=CommitProperties(
                            custom_metadata={"userMetadata": user_metadata} if user_metadata is not None else None,
                            app_transactions=[Transaction(*transaction)] if transaction else None))

    def set_properties(self, properties: Mapping[str, str]) -> None:
        """Set table properties, as a compare-and-set on the table's metadata."""
        self._delta.alter.set_table_properties(dict(properties), raise_if_not_exists=False)

    def live_files(self) -> dict[str, tuple[int, int]]:
        """The table's data files at this version: path -> (bytes, rows)."""
        import pyarrow as pa

        actions = pa.table(self._delta.get_add_actions(flatten=True)).to_pylist()
        return {row["path"]: (int(row["size_bytes"]), int(row["num_records"] or 0)) for row in actions}

    def remove_files(self, files: Mapping[str, int], *, transaction: tuple[str, int], user_metadata: str) -> None:
        """Commit the removal of ``files`` (path -> bytes) with ``dataChange=false``, so change
        feeds and streaming readers skip it, under the app ``transaction``."""
        from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

        now = int(time.time() * 1000)
        removes: list[AddAction | RemoveAction] = [
            RemoveAction(path, data_change=False, deletion_timestamp=now, size=size) for path, size in files.items()]
        self._delta.create_write_transaction(
            removes, "append", self._delta.schema(),
            commit_properties=CommitProperties(custom_metadata={"userMetadata": with_transaction(user_metadata,
                                                                                                 transaction)},
                                               app_transactions=[Transaction(*transaction)]))
