"""Operator commands (``stop-producers``, ``start-producers``, ``set``, ``unset``): a Delta
table under the home, appended by operators (the CLI, the console,
:class:`~spark_flow.ops.admin.FlowAdmin`), who apply them at once, and read in order by the
controller, which applies them again (by id: no change) or applies what an operator could not.
The commit version is a command's id, so every reader sees one order, and a replayed controller
batch applies the same commands. Each records its issuer: who, from where, through what.
"""

from __future__ import annotations

import getpass
import json
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_flow.exceptions import SparkFlowError
from spark_flow.records.home import control_path
from spark_flow.store.table import append
from spark_flow.store.tables import RecordTable

if TYPE_CHECKING:
    import pyarrow as pa

#: The entry of a command's commit ``userMetadata`` that identifies it (its token).
COMMAND_KEY = "spark.flow.command"

#: A command's target for every queue of the home (an ActiveMQ wildcard).
ALL_QUEUES = ">"
#: Commands that change the home's limits, not a queue's; the operator applies them at once
#: (:meth:`~spark_flow.ops.admin.FlowAdmin.set_home`), the controller again (by id: no change).
HOME_COMMANDS = ("set-home", "unset-home")


def _commands_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        pa.field("command", pa.string(), nullable=False),
        pa.field("target", pa.string(), nullable=False),
        pa.field("settings", pa.string(), nullable=False),
        pa.field("issued_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("token", pa.string(), nullable=False),
        *_issuer_fields(),
    ])


def _issuer_fields() -> list[pa.Field]:
    """The issuer's columns, added after the first version: nullable, and added to a table an
    older spark-flow created at the first append that writes them (Delta's schema evolution)."""
    import pyarrow as pa

    return [pa.field(name, pa.string()) for name in ("issued_by", "issued_from", "issued_through")]


@dataclass(frozen=True)
class Issuer:
    """Who issued a command (an OS user, a name a console request gives), from where (a host or
    a client's address) and through what (``cli``, ``console``, ``python``)."""

    by: str | None
    source: str | None
    through: str | None

    @classmethod
    def this_process(cls, through: str) -> Issuer:
        """This process's OS user on this host, through ``through``."""
        try:
            user: str | None = getpass.getuser()
        except (KeyError, OSError):  # a uid without a name (a container's)
            user = None
        return cls(user, socket.gethostname(), through)

    def __str__(self) -> str:
        return f"{self.by or 'unknown'} from {self.source or 'unknown'} through {self.through or 'unknown'}"


@dataclass(frozen=True)
class Command:
    """One operator command: ``id`` is the commands table's commit version (the order applied)."""

    id: int
    command: str
    target: str
    settings: Mapping[str, str | None]
    issued_at: datetime
    issued_by: str | None = None
    issued_from: str | None = None
    issued_through: str | None = None


def command_settings(command: str, settings: Mapping[str, str | None]) -> dict[str, str | None]:
    """The run-time settings a command writes for a queue: ``stop-producers`` and
    ``start-producers`` set ``producersStopped``; ``set`` its values, ``unset`` None (removed)."""
    if command in ("stop-producers", "start-producers"):
        return {"producersStopped": "true" if command == "stop-producers" else "false"}
    return dict(settings)


def with_settings(runtime: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """Run-time settings after ``changes`` (None removes a setting)."""
    merged = dict(runtime)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged



class CommandLog:
    """The commands table: appended by operators, read in order by the controller."""

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.location = control_path(home, "commands")
        self._table = RecordTable(self.location, storage_options)

    def append(self, command: str, target: str, settings: Mapping[str, str | None] | None = None,
               issuer: Issuer | None = None) -> int:
        """Append one command, by ``issuer``, as its own commit; return its id (that commit's version)."""
        import pyarrow as pa

        token, issuer = uuid.uuid4().hex, issuer or Issuer(None, None, None)
        row = {"command": command, "target": target, "settings": json.dumps(dict(settings or {})),
               "issued_at": datetime.now(UTC), "token": token, "issued_by": issuer.by,
               "issued_from": issuer.source, "issued_through": issuer.through}
        append(self.location, pa.Table.from_pylist([row], schema=_commands_schema()), self._table.storage_options,
               user_metadata=json.dumps({COMMAND_KEY: token}), properties={"delta.enableChangeDataFeed": "true"},
               merge_schema=True)
        table = self._table.open()
        assert table is not None  # written just now
        for info in table.commit_infos(0):  # newest first: found at once unless many commands were issued meanwhile
            if token in str(info.get("userMetadata") or "") and json.loads(info["userMetadata"]).get(COMMAND_KEY) == token:
                return int(info["version"])
        raise SparkFlowError(f"command {token} was written to {self.location} but its commit is not in the "
                             "table's history (was the table replaced?)")

    def latest(self) -> int:
        """The id of the newest command, -1 if there is none."""
        table = self._table.open()
        return -1 if table is None else table.version()

    def read(self, after: int = -1, upto: int | None = None) -> list[Command]:
        """The commands with ``after < id <= upto``, in order."""
        import pyarrow as pa
        import pyarrow.compute as pc

        upto = self.latest() if upto is None else upto
        table = self._table.open()
        if upto <= after or table is None:
            return []
        changes = table.changes(after + 1, upto)
        issuers = [f.name for f in _issuer_fields() if f.name in changes.schema.names]  # none in an older table
        changes = changes.select(["command", "target", "settings", "issued_at", *issuers, "_change_type", "_commit_version"])
        changes = changes.cast(pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f
                                          for f in changes.schema]))
        changes = changes.filter(pc.equal(changes["_change_type"], "insert"))
        rows = sorted(changes.to_pylist(), key=lambda r: r["_commit_version"])
        return [Command(int(r["_commit_version"]), r["command"], r["target"], json.loads(r["settings"]),
                        r["issued_at"], r.get("issued_by"), r.get("issued_from"), r.get("issued_through")) for r in rows]
