"""An operator's trust in ``spark-flow serve`` (issue 46), over real HTTP against the server in
this process and homes written by deltalake and real gates: a page of another name that
resolves to loopback reaches nothing (the name resolved by a resolver the test controls); an
operator's stop holds producers' gates at once, with or without a controller, and the answer
says so; a malformed action is a 400 naming what was wrong, never storage's fault; every action
is recorded with its issuer and logged."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.homes import home_of_one_queue, http, look_as_a_producer, serving

from spark_flow.ops.admin import FlowAdmin

#: A name of an attacker's domain that resolves to loopback (DNS rebinding).
REBOUND = "127.0.0.1.rebind.example"


@pytest.fixture
def home(tmp_path: Path) -> str:
    return home_of_one_queue(tmp_path, 3)


@pytest.fixture
def rebinding_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's resolver answers ``REBOUND`` with 127.0.0.1, as the attacker's DNS does."""
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == REBOUND else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert socket.getaddrinfo(REBOUND, None)[0][4][0] == "127.0.0.1"
    yield


def post(url: str, csrf: str, body: object, **headers: str) -> tuple[int, str]:
    return http(f"{url}api/action", "POST", body, {"Content-Type": "application/json", "X-CSRF-Token": csrf, **headers})


def raw_post(server: Any, body: bytes) -> tuple[int, str]:
    """An action whose body is exactly ``body`` (not JSON of a Python value)."""
    from urllib.error import HTTPError
    from urllib.request import Request, urlopen

    request = Request(f"{server.url}api/action", data=body, method="POST",
                      headers={"Content-Type": "application/json", "X-CSRF-Token": server.csrf})
    try:
        with urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except HTTPError as error:
        return error.code, error.read().decode()


# 1. DNS rebinding

def test_a_rebound_name_reaches_neither_page_nor_action(home: str, rebinding_resolver: None) -> None:
    """A page on ``127.0.0.1.<attacker's domain>`` resolving to loopback: the server does not
    resolve the Host it is given, so the name is refused for reading and for acting."""
    with serving(home) as server:
        port = server.server_address[1]
        host = f"{REBOUND}:{port}"
        for path in ("", "api/overview", "metrics"):
            assert http(f"{server.url}{path}", headers={"Host": host})[0] == 403, path
        assert post(server.url, server.csrf, {"action": "stop-producers", "target": "events"},
                    Host=host, Origin=f"http://{host}")[0] == 403
        assert post(server.url, server.csrf, {"action": "stop-producers", "target": "events"},
                    Origin=f"http://{host}")[0] == 403  # a loopback Host but the rebound page's Origin
    assert FlowAdmin(home).commands.read() == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.1:1", "localhost.:{port}", "127.1:{port}",
                                  "0x7f000001:{port}", "127.0.0.2:{port}"])
def test_only_literal_loopback_names_with_the_port_are_accepted(home: str, host: str) -> None:
    with serving(home) as server:
        port = server.server_address[1]
        assert http(f"{server.url}api/overview", headers={"Host": host.format(port=port)})[0] == 403
        for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert http(f"{server.url}api/overview", headers={"Host": good})[0] == 200, good


# 4. Malformed requests

@pytest.mark.parametrize(("body", "said"), [
    (b"[" * 20_000 + b"]" * 20_000, "nested too deeply"),  # 40 KB: under the size limit, past the parser's recursion
    (b'{"action": "stop-producers", "target": "ev\xffents"}', "not UTF-8"),
    (b'{"action": "stop-producers", "target": 7}', "target=7 is not valid: allowed is a queue name or pattern"),
    (b'{"action": ["stop-producers"], "target": "events"}', "action=['stop-producers'] is not valid"),
    (b'{"action": "set", "target": "events", "settings": {"stopCount": {"a": 1}}}',
     "stopCount={'a': 1} is not valid: allowed is a string or a number"),
    (b'{"action": "unset", "target": "events", "keys": [1]}', "keys=[1] is not valid"),
    (b'"stop"', "request='str' is not valid: allowed is a JSON object"),
    (b"{not json", "the request is not JSON"),
], ids=["nested", "not-utf-8", "target-number", "action-list", "setting-object", "keys-numbers", "not-object", "not-json"])
def test_a_malformed_action_is_a_400_naming_it_and_never_blames_storage(home: str, body: bytes, said: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    with serving(home) as server, caplog.at_level(logging.INFO, logger="spark_flow"):
        status, text = raw_post(server, body)
    assert status == 400 and said in json.loads(text)["error"], text
    assert "cannot read" not in text and "cannot read" not in caplog.text
    assert FlowAdmin(home).commands.read() == []


# 2. Operator commands take effect without a controller, and the answer says so

def test_stop_producers_holds_the_gates_at_once_without_a_controller(home: str) -> None:
    admin = FlowAdmin(home)
    queue = admin.queue("events")
    assert not look_as_a_producer(queue).held
    with serving(home) as server:
        status, text = post(server.url, server.csrf, {"action": "stop-producers", "target": "events"})
        answer = json.loads(text)
        assert status == 200 and answer["applied"] == ["events"] and answer["pending"] == {}, text
        assert "applied to events" in answer["message"] and "controller" not in answer["message"]
        assert look_as_a_producer(queue).held  # a producer's gate, at its next look
        overview = json.loads(http(f"{server.url}api/overview")[1])
        assert [(q["name"], q["held"], q["producers_stopped"]) for q in overview["queues"]] == [("events", True, True)]
        status, text = post(server.url, server.csrf, {"action": "set", "target": "events",
                                                      "settings": {"stopCount": 2, "resumeCount": 1}})
        assert status == 200 and json.loads(text)["applied"] == ["events"]
        post(server.url, server.csrf, {"action": "start-producers", "target": "events"})
    gate = look_as_a_producer(queue)
    assert queue.settings().thresholds.stop_count == 2 and gate.held  # depth 3 > the new stop 2
    assert queue.runtime_settings.applied() == admin.commands.latest()


def test_a_command_that_cannot_be_applied_now_says_it_is_pending_and_why(home: str, tmp_path: Path) -> None:
    """The queue's state location cannot be written (made a file): the command is recorded, and
    the answer says it waits, and why. Once it can be written, the queue's next command applies
    the one that waited first (as a controller would, in order)."""
    admin = FlowAdmin(home)
    queue = admin.queue("events")
    state = Path(queue.runtime_settings.location)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("not a directory")
    issued = admin.issue("stop-producers", "events")
    assert issued.applied == () and list(issued.pending) == ["events"]
    assert "pending for events until a flow controller or its next command applies it" in issued.message
    assert [c.id for c in admin.commands.read()] == [issued.id]
    state.unlink()
    assert admin.issue("set", "events", {"stopCount": 6}).applied == ("events",)
    assert admin.queue("events").runtime_settings.current() == {"producersStopped": "true", "stopCount": "6"}
    assert look_as_a_producer(admin.queue("events")).held


# 5. The audit trail

def test_a_console_action_is_recorded_with_its_issuer_and_logged(home: str, caplog: pytest.LogCaptureFixture) -> None:
    with serving(home) as server, caplog.at_level(logging.INFO, logger="spark_flow"):
        post(server.url, server.csrf, {"action": "stop-producers", "target": "events"}, **{"X-Spark-Flow-User": "ops-ana"})
    [command] = FlowAdmin(home).commands.read()
    assert (command.issued_by, command.issued_from, command.issued_through) == ("ops-ana", "127.0.0.1", "console")
    [line] = [r.getMessage() for r in caplog.records if r.name == "spark_flow.console.serve" and r.levelno == logging.INFO]
    assert f"command {command.id}" in line and "ops-ana" in line and "127.0.0.1" in line and "stop-producers" in line


def test_the_python_api_records_the_os_user(home: str) -> None:
    import getpass

    FlowAdmin(home).set("events", stopCount=6)
    [command] = FlowAdmin(home).commands.read()
    assert (command.issued_by, command.issued_from, command.issued_through) == (
        getpass.getuser(), socket.gethostname(), "python")


def test_a_commands_table_of_an_older_spark_flow_gets_the_issuer_columns(home: str) -> None:
    """A commands table written before the issuer was recorded: its commands are read with no
    issuer, and the next command adds the columns (Delta's schema evolution) and records one."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from spark_flow.records.commands import CommandLog

    log = CommandLog(home)
    older = pa.table({"command": ["stop-producers"], "target": ["events"], "settings": ["{}"],
                      "issued_at": pa.array([0], pa.timestamp("us", tz="UTC")), "token": ["t"]})
    write_deltalake(log.location, older, configuration={"delta.enableChangeDataFeed": "true"})
    FlowAdmin(home).start_producers("events")
    first, second = CommandLog(home).read()
    assert (first.command, first.issued_by, first.issued_through) == ("stop-producers", None, None)
    assert (second.command, second.issued_through) == ("start-producers", "python")
