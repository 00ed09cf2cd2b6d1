"""The ``flowqueue`` source's offsets as query progress shows them: they name their queue and
subscription, as Kafka's name their topics, so any process can tell what a consumer reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spark_flow.rules.depth import Position

#: A streaming source's offset, as Spark's Python data sources hand it over: a JSON object.
Offset = dict[str, Any]


def flowqueue_offset(text: str | None) -> Offset | None:
    """A flowqueue offset from query progress, or None for another source's."""
    try:
        offset = json.loads(text) if text else None
    except ValueError:
        return None
    return offset if isinstance(offset, dict) and {"queue", "subscription", "version"} <= offset.keys() else None


def offset_position(offset: Mapping[str, Any]) -> Position:
    """The queue position of a flowqueue offset."""
    return Position(int(offset["version"]), int(offset.get("index") or 0))
