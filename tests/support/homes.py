"""Homes and queues made without Spark, for tests of what reads them (metrics, the console,
``spark-flow why``): a queue table written by deltalake with the properties ``declare`` gives
it, its subscriptions, and appends that record their count and size as the sink does. Flow
transitions are recorded by a real gate (:class:`~spark_flow.flow.gate.Gate`), as a producer's.
And ``spark-flow serve`` run in this process, with a plain HTTP client."""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from spark_flow.console.serve import FlowServer, serve_options
from spark_flow.flow.gate import Gate, GateStatus
from spark_flow.flow.queue import HOME_PROPERTY, QUEUE_NAME, STATE_LOCATION, Queue, open_queue
from spark_flow.records.home import Registry
from spark_flow.rules.depth import METADATA_KEY
from support.stores import Store

SCHEMA = pa.schema([("id", pa.int64()), ("body", pa.string())])


def make_queue(home: str | Path, name: str, settings: Mapping[str, object] | None = None,
               base: str | Path | None = None, *, register: bool = True,
               storage_options: Mapping[str, str] | None = None) -> Queue:
    """A queue ``name`` declared in ``home`` (its table under ``base``, default ``<home>/../queues``)
    with ``settings`` as ``flow.*`` properties and a ``default`` subscription; registered unless
    told not (thousands are registered in one commit: ``Registry.register_all``)."""
    home, storage = str(home), dict(storage_options or {}) or None
    path = f"{base}/{name}" if base is not None else str(Path(home).parent / "queues" / name)
    write_deltalake(path, SCHEMA.empty_table(), mode="error", configuration={"delta.enableChangeDataFeed": "true"},
                    storage_options=storage)
    properties = {QUEUE_NAME: name, STATE_LOCATION: f"{home}/{name}", HOME_PROPERTY: home,
                  **{f"flow.{key}": str(value) for key, value in (settings or {}).items()}}
    DeltaTable(path, storage_options=storage).alter.set_table_properties(properties, raise_if_not_exists=False)
    queue = open_queue(path, storage)
    queue.refresh()
    queue.subscriptions.create_table()
    queue.subscriptions.create("default", -1)
    if register:
        Registry(home, storage).register(name, queue.path)
    return queue


def enqueue(queue: Queue, count: int, size: int = 10, producer: str | None = None) -> None:
    """One append of ``count`` messages of ``size`` bytes each, recorded as the sink records it
    (by ``producer``, if given)."""
    rows = pa.table({"id": pa.array(range(count), pa.int64()), "body": pa.array(["m"] * count)})
    metadata = json.dumps({METADATA_KEY: {"count": count, "size": count * size,
                                          **({"producer": producer} if producer else {})}})
    write_deltalake(queue.path, rows, mode="append", storage_options=queue.storage_options or None,
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": metadata}))


def home_of_one_queue(tmp_path: Path, messages: int) -> str:
    """A home with queue ``events`` (stop 5) holding ``messages`` messages, looked at once by a
    producer (its flow state recorded): what the console and ``serve`` tests read."""
    home = str(tmp_path / "home")
    queue = make_queue(home, "events", {"stopCount": 5})
    enqueue(queue, messages)
    look_as_a_producer(queue)
    return home


def queue_with_state(store: Store, name: str) -> Queue:
    """A queue of ``store``'s home (``<root>/home``, its table under ``<root>/queues``), without
    Spark (the suite's Spark session has no S3 file system): three messages, then in its state a
    subscription, a hold time and a run-time setting; registered. What a deletion removes."""
    queue = make_queue(store.url("home"), name, base=store.url("queues"), storage_options=store.options)
    enqueue(queue, 3)
    queue.hold_times.record("query", 0, 1.5)
    queue.runtime_settings.apply({"stopCount": "9"}, 0)
    return queue


def look_as_a_producer(queue: Queue) -> GateStatus:
    """A producer's gate looks at the queue: its flow state stepped and recorded."""
    return Gate(queue).step()


def acknowledge_all(queue: Queue, subscription: str = "default") -> None:
    queue.acknowledge(subscription, queue.refresh())


@contextmanager
def serving(home: str | Path, **options: Any) -> Iterator[FlowServer]:
    """``spark-flow serve`` of ``home`` in this process, on a free loopback port unless told
    otherwise, until the block ends."""
    server = FlowServer(serve_options(str(home), options.pop("port", 0), **options))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def http(url: str, method: str = "GET", body: object = None, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    """An HTTP request (a JSON body, if any); the status and the response's text, errors included
    (status 0: nobody answered)."""
    data = json.dumps(body).encode() if body is not None else None
    request = Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        with urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except HTTPError as error:
        return error.code, error.read().decode()
    except URLError as error:
        return 0, str(error.reason)


def console_action(url: str, action: str, target: str) -> tuple[int, str]:
    """An operator's action POSTed from the console's page at ``url``, with the page's CSRF token."""
    token = re.search(r'name="csrf-token" content="([^"]+)"', http(url)[1])
    assert token is not None, "the page carries its CSRF token"
    return http(f"{url}api/action", "POST", {"action": action, "target": target},
                {"Content-Type": "application/json", "X-CSRF-Token": token.group(1)})


def chain(home: str, names: list[str], **settings: object) -> list[Queue]:
    """Queues each of whose consumer writes to the next (``downstream``), every one filled over
    its stop and held, as producers' gates see them."""
    queues = [make_queue(home, name, {"stopCount": 5, "resumeCount": 2, **settings}) for name in names]
    for upper, lower in itertools.pairwise(queues):
        upper.subscriptions.add_downstream("default", [lower.path])
    for queue in queues:
        enqueue(queue, 8)
        assert look_as_a_producer(queue).held
    return queues
