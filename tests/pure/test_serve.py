"""``spark-flow serve`` over real HTTP (no Spark, no browser; the console in Chromium is
test_console): bad options refused in one line, the metrics and the page served, and who may act:
loopback names only on loopback, the page's CSRF token, JSON from the page's origin, the token
when bound elsewhere, nothing at all when read-only; no secret in any answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.homes import home_of_one_queue, http, serving

from spark_flow.console.serve import serve_options
from spark_flow.exceptions import ConfigurationError
from spark_flow.ops.admin import FlowAdmin

TOKEN = "a-token-of-thirty-two-characters"


@pytest.fixture
def home(tmp_path: Path) -> str:
    return home_of_one_queue(tmp_path, 8)


@pytest.mark.parametrize(("given", "refused"), [
    ({"port": "abc"}, r"--port='abc' is not valid: allowed is a port number from 0 to 65535"),
    ({"port": 70000}, r"--port=70000 is not valid"),
    ({"port": -1}, r"--port=-1 is not valid"),
    ({"bind": "0.0.0.0"}, r"--bind='0.0.0.0' is not valid: allowed is a loopback address .* give --token-file or "
                          r"\$SPARK_FLOW_TOKEN, or serve --read-only"),
    ({"bind": "0.0.0.0", "token": "short"}, r"token='\*\*\*' is not valid: allowed is a token of at least 16"),
    ({"token": "has spaces in it, sixteen+"}, r"token='\*\*\*' is not valid"),
])
def test_bad_options_are_refused_naming_them(given: dict[str, object], refused: str) -> None:
    with pytest.raises(ConfigurationError, match=refused):
        serve_options("/data/flow", **given)  # type: ignore[arg-type]


def test_elsewhere_needs_a_token_unless_read_only() -> None:
    assert serve_options("/data/flow", bind="0.0.0.0", read_only=True).token is None
    assert not serve_options("/data/flow", bind="0.0.0.0", token=TOKEN).loopback
    assert serve_options("/data/flow", bind="localhost").loopback
    assert TOKEN not in repr(serve_options("/data/flow", token=TOKEN))


def test_a_port_in_use_is_refused_naming_it(home: str) -> None:
    with (serving(home) as server, pytest.raises(ConfigurationError, match=r"--port=\d+ is not valid: allowed is a free port"),
          serving(home, port=server.server_address[1])):
        pass


def test_metrics_page_and_data_are_served(home: str) -> None:
    with serving(home) as server:
        status, text = http(f"{server.url}metrics")
        assert status == 200 and f'spark_flow_depth_messages{{home="{home}",queue="events",subscription="default"}} 8.0' in text
        status, page = http(server.url)
        assert status == 200 and f'<meta name="csrf-token" content="{server.csrf}">' in page
        assert 'id="confirm"' in page and '<script src="/static/console.js" defer>' in page
        overview = json.loads(http(f"{server.url}api/overview")[1])
        assert [(q["name"], q["held"], q["depth"]["count"]) for q in overview["queues"]] == [("events", True, 8)]
        chart = json.loads(http(f"{server.url}api/chart?queue=events")[1])
        assert chart["points"][-1]["depth"] == 8 and chart["held"]
        assert http(f"{server.url}api/chart?queue=nope")[0] == 400
        assert http(f"{server.url}static/../serve.py")[0] == 404


def action(server_url: str, csrf: str, **headers: str) -> tuple[int, str]:
    return http(f"{server_url}api/action", "POST", {"action": "stop-producers", "target": "events"},
                {"Content-Type": "application/json", "X-CSRF-Token": csrf, **headers})


def test_an_action_needs_the_page_s_token_json_and_its_origin(home: str) -> None:
    admin = FlowAdmin(home)
    with serving(home) as server:
        url, csrf = server.url, server.csrf
        origin = url.rstrip("/")
        assert action(url, "not-it") == (403, json.dumps({"error": "a cross-site request: the page's CSRF token is missing or wrong"}))
        assert action(url, csrf, Origin="http://evil.example")[0] == 403
        assert http(f"{url}api/action", "POST", None, {"Content-Type": "application/x-www-form-urlencoded",
                                                        "X-CSRF-Token": csrf})[0] == 403
        assert action(url, csrf, Host="evil.example:80")[0] == 403  # DNS rebinding: a page of another name
        assert http(url, headers={"Host": "evil.example"})[0] == 403
        assert admin.commands.read() == []
        status, text = action(url, csrf, Origin=origin)
        assert status == 200 and json.loads(text)["message"].endswith("stop-producers 'events': applied to events "
                                                                      "(producers' gates obey it from their next look)")
        assert [(c.command, c.target) for c in admin.commands.read()] == [("stop-producers", "events")]
        status, text = http(f"{url}api/action", "POST", {"action": "drop", "target": "events"},
                            {"Content-Type": "application/json", "X-CSRF-Token": csrf})
        assert status == 400 and "action='drop' is not valid: allowed is stop-producers, start-producers, set, unset" in text
        status, text = http(f"{url}api/action", "POST", {"action": "set", "target": "events", "settings": {"resumeCount": 9}},
                            {"Content-Type": "application/json", "X-CSRF-Token": csrf})
        assert status == 400 and "resumeCount='9' is not valid: allowed is a value <= flow.stopCount=5" in text
        assert len(admin.commands.read()) == 1


def test_bound_elsewhere_an_action_needs_the_token(home: str) -> None:
    admin = FlowAdmin(home)
    with serving(home, bind="0.0.0.0", token=TOKEN) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        assert action(url, server.csrf) == (401, json.dumps({"error": "an action needs this console's token"}))
        assert action(url, server.csrf, Authorization="Bearer not-the-token-at-all-no")[0] == 401
        assert admin.commands.read() == []
        assert action(url, server.csrf, Authorization=f"Bearer {TOKEN}")[0] == 200
        assert http(f"{url}metrics")[0] == 200  # reading needs no token: Prometheus scrapes it


def test_read_only_has_no_action(home: str) -> None:
    with serving(home, read_only=True) as server:
        page = http(server.url)[1]
        assert "confirm" not in page and "actions" not in page and "<button" not in page
        assert action(server.url, server.csrf)[0] == 403
    assert FlowAdmin(home).commands.read() == []


def test_no_secret_in_any_answer(home: str) -> None:
    secret = "NOT-A-REAL-SECRET-7f3a9c"
    storage = {"aws_secret_access_key": secret, "aws_access_key_id": "AKIA-NOT-REAL"}
    with serving(home, bind="0.0.0.0", token=TOKEN, storage_options=storage) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        answers = [http(f"{url}{path}")[1] for path in ("", "metrics", "api/overview", "api/chart?queue=events",
                                                        "api/why?queue=events", "api/why?queue=nope",
                                                        "static/console.js", "nope")]
        answers.append(action(url, server.csrf, Authorization="Bearer wrong-token-wrong-token")[1])
        answers.append(action(url, server.csrf, Authorization=f"Bearer {TOKEN}")[1])
    for text in answers:
        assert secret not in text and "AKIA-NOT-REAL" not in text and TOKEN not in text


def test_a_home_that_cannot_be_read_is_a_503_in_one_line_without_secrets() -> None:
    """Nothing listens at the home's S3 endpoint: each page read answers 503 with one line naming
    the home and storage's reason, never a key; a scrape answers ``spark_flow_home_up 0`` (serve
    itself is up: Prometheus' ``up`` tells the two apart)."""
    home = "s3a://flow/home"
    storage = {"aws_endpoint_url": "http://127.0.0.1:1", "allow_http": "true", "aws_access_key_id": "tests",
               "aws_secret_access_key": "s3cr3t-Never-Shown", "aws_region": "us-east-1", "max_retries": "1"}
    with serving(home, storage_options=storage) as server:
        status, text = http(f"{server.url}metrics")
        assert status == 200 and f'spark_flow_home_up{{home="{home}"}} 0.0' in text and "s3cr3t" not in text
        for path in ("api/overview",):
            status, text = http(f"{server.url}{path}")
            error = json.loads(text)["error"]
            assert status == 503 and error.startswith(f"cannot read {home}: cannot use {home}/_spark_flow/")
            assert "deltalake cannot connect to http://127.0.0.1:1" in error
            assert "s3cr3t" not in text and "\x1b" not in text and "\n" not in error
