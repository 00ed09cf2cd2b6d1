"""An operator's trust in ``spark-flow serve`` (issue 46), with the real command, a real
Prometheus and the console in the suite's headless Chromium: monitoring's own death alerts,
storage unreachable at start served and said, no storage secret in the server's command line,
``HEAD /metrics``, the CLI's commands recorded with their issuer, one time form, the chart's
labels, the dashboard's empty panels, and a table left alone between refreshes."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import Request, urlopen

import pytest
from pyspark.sql import SparkSession
from selenium.webdriver.common.by import By
from support.homes import console_action, enqueue, http, look_as_a_producer, make_queue, serving
from support.pages import click, rows, wait
from support.processes import SPARK_FLOW, spark_flow_serve
from support.servers import prometheus_server
from support.streams import is_held, start_producer, wait_until

from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.declare import declare

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
SERVE_RULES = MONITORING / "spark-flow.serve.rules.yml"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
#: A home on an S3 endpoint where nothing listens, and a secret key that must never show.
UNREACHABLE = "s3a://flow/home"
SECRET = "s3cr3t-Never-In-ps-7f3a9c"
STORAGE = {"aws_endpoint_url": "http://127.0.0.1:1", "allow_http": "true", "aws_access_key_id": "tests",
           "aws_secret_access_key": SECRET, "aws_region": "us-east-1", "max_retries": "1"}


def alerts(prometheus: str) -> dict[str, str]:
    """Prometheus' alerts now: name -> state (pending, firing)."""
    answer = json.loads(http(f"{prometheus}/api/v1/alerts")[1])
    return {a["labels"]["alertname"]: a["state"] for a in answer["data"]["alerts"]}


def instant(prometheus: str, query: str) -> list[dict[str, Any]]:
    status, text = http(f"{prometheus}/api/v1/query?{urlencode({'query': query})}")
    assert status == 200, text
    return json.loads(text)["data"]["result"]


# 3. Monitoring's own death, storage unreachable at start

@pytest.mark.processes
def test_serve_keeps_serving_an_unreachable_home_and_says_so(tmp_path: Path) -> None:
    """Nothing listens at the home's S3 endpoint when serve starts: it serves anyway, its metrics
    say ``spark_flow_home_up 0`` and its page is a 503 naming the reason; the secret given with
    ``--storage-option`` is in no command line ``ps`` shows, yet the options reach the server."""
    options = [word for key, value in STORAGE.items() for word in ("--storage-option", f"{key}={value}")]
    with spark_flow_serve("--home", UNREACHABLE, *options) as (process, url):
        status, text = http(f"{url}metrics")
        assert status == 200 and f'spark_flow_home_up{{home="{UNREACHABLE}"}} 0.0' in text, text
        status, page = http(url)
        assert status == 503 and '<meta name="csrf-token"' in page
        status, text = http(f"{url}api/overview")
        assert status == 503 and "127.0.0.1:1" in json.loads(text)["error"]  # the options reached the server
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
        assert SECRET not in command_line and "aws_endpoint_url" not in command_line, command_line
        assert SECRET not in Path(f"/proc/{process.pid}/environ").read_bytes().decode()
        with urlopen(Request(f"{url}metrics", method="HEAD"), timeout=30) as response:  # 7: HEAD answers as GET
            assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
            assert response.read() == b""
    assert process.returncode == 0
    log = process.stderr.read()  # type: ignore[union-attr]
    assert f"cannot read {UNREACHABLE}" in log and SECRET not in log


@pytest.mark.processes
def test_prometheus_alerts_when_serve_dies_or_is_never_scraped(tmp_path: Path) -> None:
    """With the shipped serve rules: a scraped serve that is killed is ``SparkFlowServeDown``
    (pending, then firing after its ``for``, as promtool's test of the rule shows); a home that
    cannot be read is ``SparkFlowHomeUnreadable``; a Prometheus with no target of the job says
    ``SparkFlowServeAbsent``."""
    home = str(tmp_path / "home")
    make_queue(home, "events")
    with (spark_flow_serve("--home", home) as (good, good_url),
          spark_flow_serve("--home", UNREACHABLE, *[w for k, v in STORAGE.items() for w in ("--storage-option", f"{k}={v}")])
          as (_, bad_url)):
        targets = [u.removeprefix("http://").rstrip("/") for u in (good_url, bad_url)]
        (tmp_path / "watching").mkdir()
        with prometheus_server(targets, tmp_path / "watching", rules=SERVE_RULES) as prometheus:
            wait_until(lambda: {r["value"][1] for r in instant(prometheus, 'up{job="spark-flow"}')} == {"1"}, 60)
            wait_until(lambda: alerts(prometheus).get("SparkFlowHomeUnreadable") == "pending", 60)
            assert "SparkFlowServeDown" not in alerts(prometheus)
            os.killpg(good.pid, signal.SIGKILL)
            good.wait(30)
            wait_until(lambda: alerts(prometheus).get("SparkFlowServeDown") == "pending", 60)
            down = json.loads(http(f"{prometheus}/api/v1/alerts")[1])["data"]["alerts"]
            assert [a["labels"]["instance"] for a in down if a["labels"]["alertname"] == "SparkFlowServeDown"] == [targets[0]]
    (tmp_path / "nothing").mkdir()
    with prometheus_server([], tmp_path / "nothing", rules=SERVE_RULES) as prometheus:
        wait_until(lambda: alerts(prometheus).get("SparkFlowServeAbsent") == "pending", 60)


@pytest.mark.short_processes
def test_the_serve_rules_fire_as_their_tests_say() -> None:
    from support.servers import PROMTOOL

    checked = subprocess.run([str(PROMTOOL), "check", "rules", SERVE_RULES.name], cwd=MONITORING, capture_output=True,
                             text=True, timeout=120, check=False)
    assert checked.returncode == 0 and "SUCCESS: 3 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([str(PROMTOOL), "test", "rules", "spark-flow.serve.rules.test.yml"], cwd=MONITORING,
                            capture_output=True, text=True, timeout=120, check=False)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


# 7. The dashboard's panels where there is no value

@pytest.mark.processes
def test_the_dashboard_shows_no_value_where_prometheus_has_none(tmp_path: Path) -> None:
    """A home without home-wide limits, whose controller never ran: Prometheus answers nothing
    for the home-depth and controller panels, which then say so in a neutral colour, not a green
    0 (Grafana shows ``noValue`` in the colour of the base threshold)."""
    home = str(tmp_path / "home")
    make_queue(home, "events")
    board = json.loads((MONITORING / "spark-flow.dashboard.json").read_text())
    panels = {p["title"]: p for p in board["panels"]}
    (tmp_path / "p").mkdir()
    with spark_flow_serve("--home", home) as (_, url), \
            prometheus_server([url.removeprefix("http://").rstrip("/")], tmp_path / "p") as prometheus:
        wait_until(lambda: instant(prometheus, f'spark_flow_queues{{home="{home}"}}'), 60)
        for title in ("Home depth", "Controller status age"):
            [target] = panels[title]["targets"]
            assert instant(prometheus, target["expr"].replace("$home", home)) == [], title
            defaults = panels[title]["fieldConfig"]["defaults"]
            assert defaults["noValue"] not in ("0", "0 s") and re.search(r"[a-z]", defaults["noValue"]), title
            assert defaults["thresholds"]["steps"][0]["color"] not in ("green", "blue"), title


# 2. An operator's stop holds a running producer, no controller anywhere

def enqueues_nothing_for(queue: Queue, seconds: float) -> bool:
    before = queue.refresh()
    time.sleep(seconds)
    return queue.refresh() == before


@pytest.mark.processes
def test_a_console_stop_holds_a_running_producer_without_a_controller(spark: SparkSession, tmp_path: Path) -> None:
    """A producer writing 5 messages a second far under its queue's stop; no controller runs.
    stop-producers from the console answers that it is applied, and the producer is held (its
    gate's next look); start-producers lets it go on."""
    home = str(tmp_path / "home")
    spark.conf.set("spark.flow.home", home)
    try:
        paced = declare(spark, str(tmp_path / "queues" / "paced"), "id BIGINT, producer STRING",
                        settings={"stopCount": 100000})
    finally:
        spark.conf.unset("spark.flow.home")
    running, _ = start_producer(spark, paced.path, tmp_path / "running", "r", 5, options={"capacity": 10})
    try:
        before = paced.refresh()
        wait_until(lambda: paced.refresh() > before, 60)  # it runs
        with serving(home) as server:
            status, text = http(f"{server.url}api/action", "POST", {"action": "stop-producers", "target": "paced"},
                                {"Content-Type": "application/json", "X-CSRF-Token": server.csrf})
            # held, and nothing enqueued for 3 s (a write in flight when the stop was applied lands first)
            wait_until(lambda: is_held(running) and enqueues_nothing_for(paced, 3), 90)
            assert status == 200 and json.loads(text)["applied"] == ["paced"], text
            held_at = paced.refresh()
            http(f"{server.url}api/action", "POST", {"action": "start-producers", "target": "paced"},
                 {"Content-Type": "application/json", "X-CSRF-Token": server.csrf})
        wait_until(lambda: paced.refresh() > held_at, 60)
    finally:
        running.stop()


# 5. The CLI's commands, with their issuer; console actions in serve's own log

@pytest.mark.processes
def test_cli_commands_and_console_actions_are_recorded_with_their_issuer_and_logged(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    queue = make_queue(home, "events", {"stopCount": 5})
    done = subprocess.run([str(SPARK_FLOW), "--home", home, "stop-producers", "events"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.startswith("command ") and "applied to events" in done.stdout, done
    assert look_as_a_producer(queue).held  # 2: in force, no controller anywhere
    with spark_flow_serve("--home", home) as (process, url):
        status, _ = console_action(url, "start-producers", "events")
        assert status == 200
    log = process.stderr.read()  # type: ignore[union-attr]
    first, second = FlowAdmin(home).commands.read()
    assert (first.issued_by, first.issued_from, first.issued_through) == (getpass.getuser(), socket.gethostname(), "cli")
    assert (second.issued_by, second.issued_from, second.issued_through) == ("loopback", "127.0.0.1", "console")
    [line] = [line for line in log.splitlines() if "console action" in line]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO ", line) and f"command {second.id}" in line, log
    listed = subprocess.run([str(SPARK_FLOW), "--home", home, "commands"], capture_output=True, text=True, timeout=120,
                            check=False).stdout
    assert "issued_by" in listed and "console" in listed and "cli" in listed and getpass.getuser() in listed


# 7. One time form, the chart's labels, a table left alone between refreshes

@pytest.mark.processes
def test_the_console_shows_utc_times_a_whole_chart_and_keeps_a_text_selection(browser: Any, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    held = make_queue(home, "events", {"stopCount": 5, "resumeCount": 2})
    enqueue(held, 8)
    look_as_a_producer(held)
    with serving(home) as server:
        browser.get(server.url)
        table = wait(browser, lambda d: rows(d) if len(rows(d)) == 1 else None)
        assert ISO.match(table["events"]["cells"][6]), table["events"]["cells"]  # held since
        assert ISO.match(browser.find_element(By.ID, "updated").text.removeprefix("read at "))
        click(browser, 'tr.queue[data-queue="events"] td.name')
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart text.time"))
        labels = browser.execute_script("""
            const svg = document.getElementById("chart");
            const width = svg.viewBox.baseVal.width;
            return [...svg.querySelectorAll("text")].map((t) => {
              const box = t.getBBox();
              return {text: t.textContent, left: box.x, right: box.x + box.width, width};
            });""")
        times = [label for label in labels if ISO.match(label["text"])]
        assert len(times) == 2 and all(t["left"] >= 0 and t["right"] <= t["width"] for t in times), labels
        assert "messages" in [label["text"] for label in labels]
        # select the queue's name; two refreshes later (the page reads the home every 2 s) it is still selected
        browser.execute_script("""
            const cell = document.querySelector('tr.queue[data-queue="events"] td.name');
            const range = document.createRange();
            range.selectNodeContents(cell.firstChild);
            window.getSelection().removeAllRanges();
            window.getSelection().addRange(range);
            window.readsSeen = 0;
            new MutationObserver(() => { window.readsSeen += 1; })
              .observe(document.getElementById("updated"), {childList: true, characterData: true, subtree: true});""")
        enqueue(held, 1)  # the depth cell changes: its row is redrawn in part
        wait(browser, lambda d: d.execute_script("return window.readsSeen") >= 2 and rows(d)["events"]["cells"][1] == "9")
        assert browser.execute_script("return window.getSelection().toString()") == "events"
