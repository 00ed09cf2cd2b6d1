"""How a queue is named: by path or by catalog name, as Delta's ``forPath`` / ``forName``.

The rule, stated once: a queue argument with a ``/`` or a URI scheme (``s3a://b/q``,
``file:/q``) is a path; anything else is a catalog table name (``events``,
``main.flow.events``). A relative path is written with its directory (``./events``). A queue's
name, what ``spark.flow.queues.<pattern>.*`` conf keys and the home's registry go by, is its
table name, or its path's last segment.
"""

from __future__ import annotations

import posixpath
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


def queue_ref(queue: str) -> QueueRef:
    """Parse a queue argument by the rule above."""
    if "/" in queue or ":" in queue:
        path = normalize_path(queue)
        return QueueRef(posixpath.basename(path.rstrip("/")), path=path)
    return QueueRef(queue, table=queue)


def queue_name(queue: str) -> str:
    """The name of a queue given by path or catalog name."""
    return queue_ref(queue).name
