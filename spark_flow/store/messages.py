"""Reading a queue's messages between two positions, in the one order every reader computes.

A position indexes a commit's messages (:class:`~spark_flow.rules.depth.Position`), so every read of
a commit (the next batch's, a replay's, another process's) must cut it at the same messages. The
change feed returns a commit's files in no fixed order, and a commit's messages have no order of
their own (the producer's write partitioned them), so inside a commit messages are put in the
order of their content (every column): two equal messages are interchangeable, and the content's
order is one every reader computes alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_flow.rules.depth import Position
    from spark_flow.store.table import Table


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with Arrow's view and large string/binary types as the plain ones, which Spark
    expects (deltalake reads view types)."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.string(), pa.large_string(): pa.string(),
             pa.binary_view(): pa.binary(), pa.large_binary(): pa.binary()}
    return pa.schema([f.with_type(plain.get(f.type, f.type)) for f in schema])


def message_schema(schema: pa.Schema) -> pa.Schema:
    """A queue's columns plus ``_position`` (the commit version) and ``_enqueue_time``."""
    import pyarrow as pa

    return schema.append(pa.field("_position", pa.int64(), nullable=False)).append(
        pa.field("_enqueue_time", pa.timestamp("us", tz="UTC"), nullable=False)
    )


def read_messages(table: Table, schema: pa.Schema, after: Position, upto: Position) -> pa.Table:
    """The messages of ``table`` (a queue with columns ``schema``) after position ``after`` up
    to position ``upto``, with ``_position`` and ``_enqueue_time``, in enqueue order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if upto <= after:
        return message_schema(schema).empty_table()
    changes = table.changes(after.version + 1, upto.reached)
    changes = changes.cast(plain_schema(changes.schema))  # filter and take have no kernels for view types
    changes = changes.filter(pc.equal(changes["_change_type"], "insert"))
    changes = _in_commit_order(changes, schema.names)
    versions = changes["_commit_version"].to_numpy()
    index = np.arange(len(versions)) - np.searchsorted(versions, versions, side="left")  # inside its commit
    keep = ~(((versions == after.version + 1) & (index < after.index))
             | ((versions == upto.version + 1) & (index >= upto.index)))
    changes = changes.filter(pa.array(keep))
    columns = [changes[name].cast(field.type) for name, field in zip(schema.names, schema, strict=True)]
    columns.append(changes["_commit_version"].cast(pa.int64()))
    columns.append(changes["_commit_timestamp"].cast(pa.timestamp("us", tz="UTC")))
    return pa.Table.from_arrays(columns, schema=message_schema(schema))


def _in_commit_order(changes: pa.Table, names: list[str]) -> pa.Table:
    """``changes`` by commit version, then by message content. Columns Arrow cannot sort
    (lists, maps) are compared by their values' ``repr``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys, columns = [("_commit_version", "ascending")], {"_commit_version": changes["_commit_version"]}
    for i, name in enumerate(names):
        column = changes[name]
        if not _sortable(column.type):
            column = pa.array([repr(v) for v in column.to_pylist()], pa.string())
        columns[f"k{i}"] = column
        keys.append((f"k{i}", "ascending"))
    return changes.take(pc.sort_indices(pa.table(columns), sort_keys=keys))


def _sortable(kind: pa.DataType) -> bool:
    """Whether Arrow's sort takes a column of this type."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return all(_sortable(kind.field(i).type) for i in range(kind.num_fields))
    return not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
                or pa.types.is_map(kind) or pa.types.is_union(kind) or pa.types.is_list_view(kind)
                or pa.types.is_large_list_view(kind))
