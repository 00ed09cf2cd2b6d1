"""The suite's tiers, a pytest plugin (``pytest_plugins`` in tests/conftest.py).

A test's folder is its tier: ``tests/pure`` (no Spark, no other process: what ``make check``
runs), ``tests/session`` (the suite's one Spark session: marked ``spark``) and
``tests/processes`` (Spark applications, servers, jobs, the CLI as a process, browsers: marked
``processes``). A test outside them (tests/test_readme.py) is marked by what it uses: ``spark``
for the session fixture, ``processes`` for a server fixture or an object store parameter. A
test in ``tests/pure`` that uses the session or a server, or one in ``tests/session`` that
starts processes, stops the run at collection, naming the folder it belongs in; a quick-tier
test that starts a process fails (:func:`refuse_processes`).

``make test`` runs two xdist workers: the ``processes`` tests one at a time on one of them (the
``processes`` group), everything else on the other (the ``session`` group, with the
``short_processes`` tests and the ``beside_group`` kill -9 trials: in the group, those ended
140 s after the other worker)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
#: The tier folders and the marker each gives its tests (``pure``: none).
FOLDERS = {"pure": None, "session": "spark", "processes": "processes"}
#: Fixtures that start servers (processes of their own): a test that uses one is marked ``processes``.
SERVERS = {"spark_connect", "connect_session", "spark_cluster", "s3_server", "azurite_server", "gcs_server",
           "yarn_cluster", "governed_connect"}
#: The audit events of a process started (subprocess, os.system, os.exec*, os.spawn*, posix_spawn, fork).
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
                            "os.forkpty"})


def tier_folder(item: pytest.Item) -> str | None:
    """The tier folder ``item`` sits in, or None outside them."""
    folder = Path(item.path).parent
    return folder.name if folder.parent == TESTS and folder.name in FOLDERS else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups: after it, none was ever made
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what the tiers need: the folder's marker, ``spark`` on every test that uses the
    suite's session, and ``processes`` on every test that uses a server (directly or through an
    object ``store``) or is marked ``short_processes``. The ``processes`` tests are one xdist
    group, one at a time on one worker, but for the ``short_processes`` ones (short commands
    that start no Spark application or server and wait for no time) and the ``beside_group`` one
    (the producer and consumer kill -9 trials), which run beside the group like any other test.
    Every other test is the ``session`` group, on the other worker: none is left to the group's
    worker after the group. The group's ``mostly_waiting`` tests run first: beside the other
    worker's tests they cost little, and at the end, alone, they left a core idle."""
    misplaced = []
    for item in items:
        folder = tier_folder(item)
        if folder is not None and FOLDERS[folder] is not None:
            item.add_marker(FOLDERS[folder])
        names = set(getattr(item, "fixturenames", ()))
        if "spark" in names:
            item.add_marker(pytest.mark.spark)
        param = getattr(getattr(item, "callspec", None), "params", {}).get("store", "local")
        short = item.get_closest_marker("short_processes") is not None
        if names & SERVERS or param != "local" or short:
            item.add_marker(pytest.mark.processes)
        processes = item.get_closest_marker("processes") is not None
        if (folder == "pure" and (processes or item.get_closest_marker("spark"))) or (folder == "session" and processes):
            misplaced.append(f"{item.nodeid}: belongs in tests/{'processes' if processes else 'session'}")
        beside = short or item.get_closest_marker("beside_group") is not None
        if processes and not beside:  # one at a time: 2 cores, timed waits
            item.add_marker(pytest.mark.xdist_group("processes"))
        else:
            item.add_marker(pytest.mark.xdist_group("session"))
    if misplaced:
        raise pytest.UsageError("tests in the wrong tier's folder:\n" + "\n".join(misplaced))
    items.sort(key=lambda item: item.get_closest_marker("mostly_waiting") is None)  # stable: the rest in order


#: The quick-tier test whose call runs now (None between calls and for other tiers).
_refusing: str | None = None


def refuse_processes(event: str, args: tuple[object, ...]) -> None:
    """An audit hook: a process started while a quick-tier test's call runs fails that test.
    Audit hooks cannot be removed: it is added once and checks :data:`_refusing`."""
    if _refusing is not None and event in PROCESS_EVENTS:
        raise AssertionError(f"{_refusing} started a process ({event} {args[:2]!r}) but is not marked processes "
                             "(a test in tests/processes is)")


def pytest_configure(config: pytest.Config) -> None:
    sys.addaudithook(refuse_processes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test not marked ``processes`` fails if it starts a process: the quick tier (``-m "not
    processes"``) holds only tests that need no other process, and this keeps it so."""
    global _refusing
    if item.get_closest_marker("processes") is not None:
        return (yield)
    _refusing = item.nodeid
    try:
        return (yield)
    finally:
        _refusing = None
