"""How a queue is named: by path or by catalog name, as Delta's ``forPath`` / ``forName``.

The rule, stated once: a queue argument with a ``/`` or a URI scheme (``s3a://b/q``,
``file:/q``) is a path; anything else is a catalog table name (``events``,
``main.flow.events``). A relative path is written with its directory (``./events``). A queue's
name, what ``spark.flow.queues.<pattern>.*`` conf keys and the home's registry go by, is its
table name, or its path's last segment.

A home follows the same rule: a path, or a schema's name (``main.flow``), whose tables are managed
tables (governed compute, where nobody sees a path). Where a path home keeps a folder, a schema
home keeps a table, or tables whose names start with it (:func:`home_member`,
:func:`state_member`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass


def normalize_path(location: str) -> str:
    """A table location as deltalake takes it (Spark writes local paths as ``file:/x``)."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if location.startswith("file:"):
        return location[len("file:"):]
    return location


@dataclass(frozen=True)
class QueueRef:
    """A queue as a user named it: ``path`` for a path, ``table`` for a catalog name."""

    name: str
    path: str | None = None
    table: str | None = None

    @property
    def sql(self) -> str:
        """The queue as Spark SQL names a table: ``delta.`<path>``` or the table name."""
        return f"delta.`{self.path}`" if self.path is not None else str(self.table)


def is_path(location: str) -> bool:
    """Whether a queue, a home or a state location is a path (the rule above), not a catalog name."""
    return "/" in location or ":" in location


def identifier(name: str) -> str:
    """``name`` as a plain SQL identifier, the part of a table name spark-flow makes from it."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def home_member(home: str, name: str) -> str:
    """What a home keeps under ``name``: a folder of a path home, the table (or name prefix of
    tables) ``<schema>.<name>`` of a schema home."""
    return posixpath.join(home.rstrip("/"), name) if is_path(home) else f"{home}.{identifier(name)}"


def state_member(state: str, name: str) -> str:
    """One of the tables at a state location: its folder ``name`` for a path, the table named
    ``<location>_<name>`` for a catalog name (a managed table has no folder to hold another)."""
    return posixpath.join(state, name) if is_path(state) else f"{state}_{identifier(name)}"


def queue_ref(queue: str) -> QueueRef:
    """Parse a queue argument by the rule above."""
    if is_path(queue):
        path = normalize_path(queue)
        return QueueRef(posixpath.basename(path.rstrip("/")), path=path)
    return QueueRef(queue, table=queue)


def queue_name(queue: str) -> str:
    """The name of a queue given by path or catalog name."""
    return queue_ref(queue).name
