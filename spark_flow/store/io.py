"""Which way a process reaches a table (docs/design.md 2.10): ``deltalake`` in its own Python, or the
engine, the SparkSession at hand, which alone holds the storage's credentials on governed compute
(Databricks standard and serverless: SPARK-NOTES 19).

``spark.flow.io`` rides with the storage options (:data:`~spark_flow.rules.storage_options.IO_OPTION`),
so every handle, every Python worker and the CLI judge it alike. ``auto`` (the default) takes
deltalake where this Python reaches the storage: a local path always, an object store or HDFS
unless a first look with deltalake finds no credentials here (looked at once per store and
options; an endpoint it cannot reach stays deltalake's, whose failure names the setting). The
engine's session is the active one, or the one an entry point attached (:func:`attach`):
threads of a classic driver see no active session of their own.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from spark_flow.exceptions import ConfigurationError, StorageAccessError
from spark_flow.rules.names import is_path
from spark_flow.rules.storage_options import IO_OPTION

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_ATTACHED: list[SparkSession] = []
_REACHES: dict[tuple[str, tuple[tuple[str, str], ...]], bool] = {}
_LOCK = threading.Lock()


def attach(spark: SparkSession) -> None:
    """Make ``spark`` the engine of this process's tables (an entry point that was given one)."""
    with _LOCK:
        _ATTACHED[:] = [spark]


def session() -> SparkSession | None:
    """The SparkSession this process has: the active or default one, else the one attached; None
    in a process that has none (a Python data source's worker, the CLI without ``--remote``)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    try:  # the thread's active session, else the process's default one (a thread of a driver has none active)
        active = SparkSession.active()
    except Exception:  # none (NO_ACTIVE_OR_DEFAULT_SESSION), or a classic worker process with no SparkContext
        active = None
    if active is not None:
        return active
    with _LOCK:
        return _ATTACHED[0] if _ATTACHED else None


def engine_session(location: str) -> SparkSession:
    """The session the engine reads and writes ``location`` with; raises where there is none."""
    found = session()
    if found is None:
        raise ConfigurationError(IO_OPTION, "engine", f"deltalake, or a process with a SparkSession: {location} is "
                                 "read through the engine here, and this process (a Python worker, or the CLI "
                                 "without --remote) has no session")
    return found


def deltalake_options(options: Mapping[str, str] | None) -> dict[str, str] | None:
    """The storage options as deltalake takes them (``spark.flow.io`` is the store's, not
    deltalake's); None for none."""
    return {key: value for key, value in (options or {}).items() if key != IO_OPTION} or None


def mode(options: Mapping[str, str] | None) -> str:
    """``spark.flow.io`` as the options carry it: auto where they say nothing."""
    return (options or {}).get(IO_OPTION) or "auto"


def uses_engine(location: str, options: Mapping[str, str] | None) -> bool:
    """Whether ``location`` is read and written through the engine by this process: always a
    catalog name's (a managed table), which only the engine reaches."""
    chosen = mode(options)
    if not is_path(location):
        if chosen == "deltalake":
            raise ConfigurationError(IO_OPTION, chosen, f"engine or auto: {location} is a catalog table's name, "
                                     "which only the engine reaches")
        return True
    if chosen != "auto":
        return chosen == "engine"
    if "://" not in location or location.startswith("file:"):
        return False
    store = location.split("://", 1)[0] + "://" + location.split("://", 1)[1].split("/", 1)[0]
    key = (store, tuple(sorted((deltalake_options(options) or {}).items())))
    with _LOCK:
        known = _REACHES.get(key)
    if known is None:
        known = _deltalake_reaches(location, options)
        with _LOCK:
            _REACHES[key] = known
    return not known and session() is not None


def _deltalake_reaches(location: str, options: Mapping[str, str] | None) -> bool:
    """Whether deltalake in this Python reaches ``location``'s store: False only when it has no
    credentials there (what the engine may hold alone); an endpoint or namenode it cannot reach,
    or credentials the storage refuses, stay deltalake's, whose failure names the setting."""
    from deltalake import DeltaTable

    from spark_flow.store.access import NO_CREDENTIALS, access_error

    try:
        DeltaTable.is_deltatable(location, storage_options=deltalake_options(options))
    except OSError as error:
        named = error if isinstance(error, StorageAccessError) else access_error(location, dict(options or {}), error)
        return not (named is not None and named.missing.startswith(NO_CREDENTIALS))
    return True


def chosen_mode(location: str, options: Mapping[str, str] | None) -> str:
    """How this process reaches ``location`` (``engine`` or ``deltalake``) and why, as doctor
    and the docs say it."""
    chosen = mode(options)
    if chosen != "auto":
        return f"{chosen} (spark.flow.io={chosen})"
    if not is_path(location):
        return "engine (spark.flow.io=auto: a catalog name, which only the engine reaches)"
    if uses_engine(location, options):
        return "engine (spark.flow.io=auto: this Python's deltalake cannot reach the storage; the session can)"
    return "deltalake (spark.flow.io=auto: this Python reaches the storage)"
