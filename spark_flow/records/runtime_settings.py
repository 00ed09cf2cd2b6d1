"""Settings an operator changed at run time (``set``, ``stop-producers``), per queue.

They live in a small Delta table beside the queue's subscriptions, not in the queue table's
properties: a metadata commit on the queue table would fail every producer's append that runs
at the same time (Delta's ``MetadataChangedException``). The controller writes them, in command
order; gates read them on every look at the queue, as a layer just above the table properties.
A removed setting (``unset``) keeps its row with no value, so an older command replayed after
it cannot bring the value back.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_flow.store.table import ALL, Merge
from spark_flow.store.tables import Owner, RecordTable

if TYPE_CHECKING:
    import pyarrow as pa


#: The table's folder in a queue's state location (the name it has had since the first version).
RUNTIME_SETTINGS_FOLDER = "overrides"


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.string()),
        pa.field("command_id", pa.int64(), nullable=False),
        pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ])


class RuntimeSettings:
    """The run-time settings of one queue, at ``location``, by setting name (``stopCount``);
    written while ``owner``, the queue, is there."""

    def __init__(self, location: str, storage_options: Mapping[str, str] | None = None, *,
                 owner: Owner | None = None) -> None:
        self.location = location
        self._table = RecordTable(location, storage_options, owner=owner)
        self._version = -1
        self._settings: dict[str, str] = {}
        self._changed: dict[str, datetime] = {}
        self._applied = -1

    def current(self) -> dict[str, str]:
        """The settings in force, read again only when the table has a new version."""
        table = self._table.open()
        if table is not None and table.version() != self._version:
            rows = table.rows(["key", "value", "command_id", "updated_at"])
            self._settings = {row["key"]: row["value"] for row in rows if row["value"] is not None}
            self._changed = {row["key"]: row["updated_at"] for row in rows}
            self._applied = max((row["command_id"] for row in rows), default=-1)
            self._version = table.version()
        return dict(self._settings)

    def changed_at(self, key: str) -> datetime | None:
        """When setting ``key`` was last set or removed, None if never (how long an operator's
        ``stop-producers`` has held a queue)."""
        self.current()
        return self._changed.get(key)

    def applied(self) -> int:
        """The id of the newest command applied to this queue, -1 if none."""
        self.current()
        return self._applied

    def apply(self, settings: Mapping[str, str | None], command_id: int) -> None:
        """Set ``settings`` as command ``command_id`` did (None removes a setting); an older command
        never overwrites a newer one, so applying a command again (a replayed controller batch)
        changes nothing."""
        import pyarrow as pa

        now = datetime.now(UTC)
        rows = pa.Table.from_pylist([{"key": k, "value": None if v is None else str(v), "command_id": command_id,
                                      "updated_at": now} for k, v in settings.items()], schema=_schema())
        self._table.upsert(rows, Merge("t.key = s.key", update=ALL, update_when="s.command_id > t.command_id", insert=ALL))

    def fill(self, settings: Mapping[str, str]) -> None:
        """Record ``settings`` where no row has the key yet (a process's Spark conf supplying a
        value nobody recorded): a MERGE that inserts only, so a value recorded first, or a
        command's, is kept. Any command applied later replaces them."""
        import pyarrow as pa

        now = datetime.now(UTC)
        rows = pa.Table.from_pylist([{"key": k, "value": str(v), "command_id": -1, "updated_at": now}
                                     for k, v in settings.items()], schema=_schema())
        self._table.upsert(rows, Merge("t.key = s.key", insert=ALL))
