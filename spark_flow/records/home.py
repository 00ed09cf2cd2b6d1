"""The control plane's location (``spark.flow.home``) and its registry of queues.

Everything several Spark applications share lives under the home, in Delta tables written with
``deltalake`` (no SparkSession needed, any storage Delta supports)::

    <home>/_spark_flow/queues     registry: queue name -> table location
    <home>/_spark_flow/commands   operator commands, in commit order
    <home>/_spark_flow/status     one row per queue and subscription (the controller's output)
    <home>/_spark_flow/history    samples and transitions over time (for plots)
    <home>/_spark_flow/settings   the home-wide limits (homeStopCount, ...), see spark_flow.flow.homeflow
    <home>/_spark_flow/flow       the home's flow state; <home>/_spark_flow/transitions its history
    <home>/<queue name>/          a queue's own subscriptions, transitions and run-time settings
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_flow.rules.names import home_member, state_member
from spark_flow.store.table import ALL, Merge, sql_string
from spark_flow.store.tables import RecordTable

if TYPE_CHECKING:
    import pyarrow as pa

CONTROL_DIR = "_spark_flow"
HOME_CONF = "spark.flow.home"


def control_path(home: str, table: str) -> str:
    """The location of one of the control plane's tables."""
    return state_member(home_member(home, CONTROL_DIR), table)


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("name", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("registered_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ])


class Registry:
    """The queues a home knows: what the controller watches and the CLI lists, by name."""

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.location = control_path(home, "queues")
        self._table = RecordTable(self.location, storage_options)
        self._listed: tuple[int, dict[str, str]] = (-1, {})  # the last read, by table version

    def register(self, name: str, path: str) -> None:
        """Add queue ``name`` at ``path``, or move the name to ``path``."""
        self.register_all({name: path})

    def register_all(self, queues: Mapping[str, str]) -> None:
        """Add or move several queues (name -> path) in one commit: registering thousands one
        commit each would cost a MERGE per queue."""
        import pyarrow as pa

        now = datetime.now(UTC)
        rows = pa.Table.from_pylist([{"name": name, "path": path, "registered_at": now} for name, path in queues.items()],
                                    schema=_schema())
        self._table.upsert(rows, Merge("t.name = s.name", update={"path": "s.path"}, update_when="t.path <> s.path",
                                       insert=ALL))

    def unregister(self, name: str) -> None:
        """Remove queue ``name`` (a deleted queue): the controller stops looking at it."""
        self._table.delete(f"name = {sql_string(name)}")

    def queues(self) -> dict[str, str]:
        """Every registered queue: name -> table location; read again only when the table has a
        new version (a gate of a home with limits sums the home's queues on every look)."""
        table = self._table.open()
        if table is None:
            return {}
        if self._listed[0] != table.version():
            rows = table.rows(["name", "path"])
            self._listed = (table.version(), {r["name"]: r["path"] for r in sorted(rows, key=lambda r: r["name"])})
        return dict(self._listed[1])
