"""One handle per table and process: queues, homes and the control tables are opened once and
caught up afterwards, so their readers stay warm (a ledger's commits, a state table's last
version) and every part of a process judges a queue from the same reads.

Handles are keyed by their kind, location and storage options. A handle is opened outside the
lock, so threads open several at once (the controller's source looks at many queues in
parallel); one opened twice in a race is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from spark_flow.rules.names import normalize_path
from spark_flow.store.access import named_access_errors

T = TypeVar("T")

_Key = tuple[str, str, tuple[tuple[str, str], ...]]
_OPEN: dict[_Key, object] = {}
_LOCK = threading.Lock()


def shared(kind: str, location: str, storage_options: Mapping[str, str] | None,
           open_handle: Callable[[str, dict[str, str]], T]) -> T:
    """The process's handle of ``kind`` on ``location``: ``open_handle(location, options)``
    the first time, the same object after."""
    options = dict(storage_options or {})
    key = (kind, normalize_path(location), tuple(sorted(options.items())))
    with _LOCK:
        found = _OPEN.get(key)
    if found is None:
        with named_access_errors(key[1], options):  # the first look at a location says what it lacks
            handle = open_handle(key[1], options)
        with _LOCK:
            found = _OPEN.setdefault(key, handle)
    return cast(T, found)  # stored here under its kind by this function


def is_open(kind: str, location: str, storage_options: Mapping[str, str] | None) -> bool:
    """Whether this process has its handle of ``kind`` on ``location`` already."""
    key = (kind, normalize_path(location), tuple(sorted(dict(storage_options or {}).items())))
    with _LOCK:
        return key in _OPEN


def forget(kind: str, location: str) -> None:
    """Drop the handles of ``kind`` on ``location`` (a queue declared again: its properties changed)."""
    path = normalize_path(location)
    with _LOCK:
        for key in [key for key in _OPEN if key[:2] == (kind, path)]:
            del _OPEN[key]
