"""``spark-flow serve`` over real HTTP (no Spark, no browser; the console in Chromium is
test_console): bad options refused in one line, the metrics and the page served, and who may act:
loopback names only on loopback, the page's CSRF token, JSON from the page's origin, the token
when bound elsewhere, nothing at all when read-only; no secret in any answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.homes import enqueue, home_of_one_queue, http, look_as_a_producer, make_queue, serving
from support.stores import Store

SPARK_FLOW = Path(sys.executable).parent / "spark-flow"


@pytest.fixture
def home(tmp_path: Path) -> str:
    return home_of_one_queue(tmp_path, 8)


@pytest.mark.short_processes
def test_the_command_refuses_in_one_line_with_status_2(home: str, tmp_path: Path) -> None:
    for args, line in [
        (["--port", "abc"], "spark-flow serve: error: --port='abc' is not valid: allowed is a port number from 0 to 65535"),
        (["--bind", "0.0.0.0"], "spark-flow serve: error: --bind='0.0.0.0' is not valid: allowed is a loopback address"),
        (["--token-file", str(tmp_path / "none")], "spark-flow serve: error: --token-file="),
    ]:
        done = subprocess.run([str(SPARK_FLOW), "--home", home, "serve", *args], capture_output=True, text=True,
                              timeout=60, check=False, env={k: v for k, v in os.environ.items() if k != "SPARK_FLOW_TOKEN"})
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.startswith(line) and len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.short_processes
def test_the_command_serves_until_terminated(home: str) -> None:
    process = subprocess.Popen([str(SPARK_FLOW), "--home", home, "serve", "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("spark-flow serve: http://127.0.0.1:") and line.endswith(f"for home {home}\n")
        url = line.split()[2]
        status, text = http(f"{url}metrics")
        assert status == 200 and 'spark_flow_producers_held{home="' in text
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert process.stderr.read() == ""  # type: ignore[union-attr]


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_home_on_s3_is_served_without_its_keys(store: Store) -> None:
    """A home and queue on the suite's S3 server (moto): read with the storage options, whose
    keys appear in no answer."""
    home = store.url("home")
    queue = make_queue(home, "events", {"stopCount": 5}, base=store.url("queues"), storage_options=store.options)
    enqueue(queue, 8)
    look_as_a_producer(queue)
    with serving(home, storage_options=store.options) as server:
        answers = [http(f"{server.url}{path}")[1] for path in ("", "metrics", "api/overview", "api/chart?queue=events",
                                                               "api/why?queue=events")]
    assert f'spark_flow_producers_held{{home="{home}",queue="events"}} 1.0' in answers[1]
    assert json.loads(answers[2])["queues"][0]["depth"]["count"] == 8
    assert store.secrets and not [s for s in store.secrets for text in answers if s in text]
