"""Watching spark-flow with standard tools: the alert rules checked by ``promtool`` (Debian's
``prometheus``), rules and dashboard using only served metrics, and, end to end, a real
Prometheus scraping ``spark-flow serve`` while a producer is held (its HTTP API answering what
the controller's status table has, every dashboard query answered) and the console in headless
Chromium holding a running producer with a stop-producers action."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from pyspark.sql import SparkSession
from support.pages import click, rows, shown, wait
from support.servers import PROMTOOL, prometheus_server
from support.streams import is_held, start_producer, status_of, wait_until

from spark_flow.controller.query import start_controller, stop_between_batches
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.declare import declare

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "spark-flow.rules.yml"
DASHBOARD = MONITORING / "spark-flow.dashboard.json"
SPARK_FLOW = Path(sys.executable).parent / "spark-flow"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():
        raise RuntimeError(f"{PROMTOOL} missing: apt-get install prometheus (.ci/run does)")
    return subprocess.run([str(PROMTOOL), *args], cwd=MONITORING, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.short_processes
def test_the_rules_are_valid_and_fire_on_synthetic_series_as_their_tests_say() -> None:
    checked = promtool("check", "rules", RULES.name)
    assert checked.returncode == 0 and "SUCCESS: 9 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "spark-flow.rules.test.yml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' and its variables'."""
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return queries + [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]


# End to end: a home with a controller, a producer held by its queue's depth and one running.

@pytest.fixture(scope="module")
def pipeline(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A home with a running controller: ``events`` (stop 20 / resume 10), whose producer
    (20 messages a second, capacity 10) is held, and ``paced``, whose producer (5 a second) runs;
    ``spark-flow serve`` of the home, started as its users start it."""
    base = tmp_path_factory.mktemp("monitoring")
    home = str(base / "home")
    spark.conf.set("spark.flow.home", home)
    try:
        events = declare(spark, str(base / "queues" / "events"), "id BIGINT, producer STRING",
                         settings={"stopCount": 20, "resumeCount": 10})
        paced = declare(spark, str(base / "queues" / "paced"), "id BIGINT, producer STRING",
                        settings={"stopCount": 100000})
    finally:
        spark.conf.unset("spark.flow.home")
    controller = start_controller(spark, home, checkpoint_location=str(base / "controller"), trigger="500 milliseconds")
    held, _ = start_producer(spark, events.path, base / "held", "h", 20, options={"capacity": 10})
    running, _ = start_producer(spark, paced.path, base / "running", "r", 5, options={"capacity": 10})
    serve = subprocess.Popen([str(SPARK_FLOW), "--home", home, "serve", "--port", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        url = serve.stdout.readline().split()[2]  # type: ignore[union-attr]
        admin = FlowAdmin(home)
        wait_until(lambda: is_held(held) and status_of(admin, "events").get("flow_stopped") is True, 120)
        yield {"home": home, "admin": admin, "url": url, "held": held, "running": running, "events": events,
               "paced": paced, "base": base}
    finally:
        serve.terminate()
        serve.wait(30)
        for query in (held, running):
            query.stop()
        stop_between_batches(controller)


def instant(prometheus: str, query: str) -> list[dict[str, Any]]:
    """Prometheus' answer to an instant query (its HTTP API)."""
    from support.homes import http

    status, text = http(f"{prometheus}/api/v1/query?{urlencode({'query': query})}")
    answer = json.loads(text)
    assert status == 200 and answer["status"] == "success", text
    return answer["data"]["result"]


@pytest.mark.processes
def test_prometheus_scraping_serve_answers_what_the_status_table_has(pipeline: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    """While the producer of ``events`` is held: Prometheus' own HTTP API gives its depth, flow
    state, flowStoppedCount, thresholds and held producers as the controller's status table has
    them; the rules load; every dashboard query is answered."""
    admin, home = pipeline["admin"], pipeline["home"]
    target = pipeline["url"].removeprefix("http://").rstrip("/")
    with prometheus_server([target], tmp_path, rules=RULES) as prometheus:
        selector = f'{{home="{home}",queue="events",subscription="default"}}'
        wait_until(lambda: instant(prometheus, f"spark_flow_flow_stopped{selector}"), 60)
        assert is_held(pipeline["held"])
        status = status_of(admin, "events")
        expected = {"spark_flow_depth_messages": status["depth_count"], "spark_flow_depth_bytes": status["depth_size"],
                    "spark_flow_flow_stopped": 1, "spark_flow_flow_stopped_total": status["flow_stopped_count"]}

        def answered() -> dict[str, float]:
            return {name: float(instant(prometheus, f"{name}{selector}")[0]["value"][1]) for name in expected}

        wait_until(lambda: answered() == expected, 30)  # the scrape after the status row's look
        assert 20 < status["depth_count"] <= 30 and status["flow_stopped_count"] == 1  # stop + capacity
        queue = f'{{home="{home}",queue="events"}}'
        for name, value in (("spark_flow_stop_messages", status["stop_count"]),
                            ("spark_flow_resume_messages", status["resume_count"]),
                            ("spark_flow_producers_held", 1)):
            assert float(instant(prometheus, f"{name}{queue}")[0]["value"][1]) == value
        since = float(instant(prometheus, f"spark_flow_producers_held_since_timestamp_seconds{queue}")[0]["value"][1])
        assert since <= time.time()
        assert instant(prometheus, f'spark_flow_producers_held{{home="{home}",queue="paced"}}')[0]["value"][1] == "0"

        from support.homes import http

        groups = json.loads(http(f"{prometheus}/api/v1/rules")[1])["data"]["groups"]
        assert [(r["name"], r["health"]) for r in groups[0]["rules"]][:2] == [
            ("SparkFlowProducersHeldLong", "ok"), ("SparkFlowConsumerStalled", "ok")]
        for query in dashboard_queries():
            promql = query.replace("$home", home).replace('queue=~"$queue"', 'queue=~".+"').replace(
                "$__rate_interval", "1m").replace("$__range", "5m")
            promql = re.sub(r"label_values\((.*),\s*\w+\)", r"\1", promql)  # Grafana's: the series it lists
            instant(prometheus, promql)  # a bad query is an error answer
        assert instant(prometheus, f'spark_flow_depth_messages{{home="{home}",queue=~".+"}}')


@pytest.mark.processes
def test_a_stop_producers_action_in_the_console_holds_a_running_producer(pipeline: dict[str, Any],
                                                                        browser: Any) -> None:
    """The console shows ``events`` held and ``paced`` flowing; stop-producers on ``paced``,
    confirmed, is applied by the controller and holds its running producer, which the console
    then shows held by the operator; start-producers lets it go."""
    admin, running, paced = pipeline["admin"], pipeline["running"], pipeline["paced"]
    before = paced.refresh()
    wait_until(lambda: paced.refresh() > before, 60)  # it runs
    browser.get(pipeline["url"])
    wait(browser, lambda d: len(table := rows(d)) == 2 and "held" in table["events"]["classes"]
         and table["paced"]["cells"][5] == "flowing")
    click(browser, 'button.action[data-action="stop-producers"][data-queue="paced"]')
    browser.find_element("id", "confirm-yes").click()
    wait(browser, lambda d: d.find_element("id", "message").text.startswith("command "))
    held_at = before
    try:
        wait_until(lambda: is_held(running) and status_of(admin, "paced").get("producers_stopped") is True, 90)
        time.sleep(2)  # a write in flight when the stop was applied lands
        held_at = paced.refresh()
        time.sleep(2)
        assert is_held(running) and paced.refresh() == held_at, "a stopped producer writes nothing"
        wait(browser, lambda d: rows(d)["paced"]["cells"][5] == "held (operator)", 30)
        click(browser, 'tr.queue[data-queue="events"] td.name')
        wait(browser, lambda d: d.find_elements("css selector", "#chart rect.held"))
        assert {"held"} <= shown(browser, "#pipeline g.node")["paced"]["classes"]
        screenshot = os.environ.get("SPARK_FLOW_CONSOLE_SCREENSHOT")  # this pipeline's page, on request (docs/console.png: bench/console.py)
        path = Path(pipeline["base"]) / "console.png"
        browser.save_screenshot(str(path))
        assert path.read_bytes()[:4] == b"\x89PNG"
        if screenshot:
            shutil.copy(path, screenshot)
    finally:
        admin.start_producers("paced")
    wait_until(lambda: paced.refresh() > held_at, 90)


@pytest.mark.processes
def test_readme_monitoring_block_as_written(tmp_path: Path) -> None:
    """The Monitoring commands of docs/operations.md, each as written (``/tmp/flow`` under a temporary folder,
    the ports 9108 and 9090 free ones, ``monitoring/`` a copy with that port), on the
    walkthrough's home with ``events`` held: the console and metrics served, ``why`` naming the
    root cause, the rules' tests passing, and Prometheus, configured by ``monitoring/prometheus.yml``,
    answering that ``events`` holds its producers."""
    from support.docs import bash_blocks
    from support.homes import enqueue, http, look_as_a_producer, make_queue
    from support.servers import free_port

    [block] = bash_blocks("docs/operations.md", "Monitoring")
    assert [words[0] for words in block] == ["export", "spark-flow", "spark-flow", "promtool", "prometheus"]
    base = tmp_path / "flow"
    queue = make_queue(str(base / "home"), "events", {"stopCount": 5, "resumeCount": 2}, base=base / "queues")
    enqueue(queue, 8)
    look_as_a_producer(queue)
    ports = {"9108": str(free_port()), "9090": str(free_port())}
    (tmp_path / "monitoring").mkdir()
    for source in MONITORING.iterdir():
        (tmp_path / "monitoring" / source.name).write_text(source.read_text().replace("9108", ports["9108"]))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def written(words: list[str]) -> list[str]:
        for port, free in ports.items():
            words = [w.replace(port, free) for w in words]
        return [w.replace("/tmp/flow", str(base)) for w in words]

    started: list[subprocess.Popen[str]] = []
    try:
        for words in block:
            if words[0] == "export":
                key, _, value = written(words)[1].partition("=")
                env[key] = value
            elif words[-1] == "&":
                started.append(subprocess.Popen(written(words[:-1]), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, text=True, start_new_session=True))
                if words[0] == "spark-flow":
                    assert started[-1].stdout.readline().startswith(  # type: ignore[union-attr]
                        f"spark-flow serve: http://127.0.0.1:{ports['9108']}/ (the console")
            else:
                done = subprocess.run(written(words), cwd=tmp_path, env=env, capture_output=True, text=True,
                                      timeout=120, check=False)
                assert done.returncode == 0, done.stdout + done.stderr
                if words[1] == "why":
                    assert done.stdout.startswith("events: holds its producers: subscription default flow-stopped")
                    assert "root cause: the consumer of subscription default" in done.stdout
        prometheus = f"http://127.0.0.1:{ports['9090']}"
        wait_until(lambda: http(f"{prometheus}/-/ready")[0] == 200, 60)
        held = 'spark_flow_producers_held{queue="events"}'
        wait_until(lambda: [r["value"][1] for r in instant(prometheus, held)] == ["1"], 60)  # its first scrape

        def rules() -> list[dict[str, object]]:
            return json.loads(http(f"{prometheus}/api/v1/rules")[1])["data"]["groups"][0]["rules"]

        # health "unknown" until the group's first evaluation, up to an evaluation_interval (15 s) after the start
        wait_until(lambda: {r["health"] for r in rules()} != {"unknown"}, 60)
        assert len(rules()) == 9 and {r["health"] for r in rules()} == {"ok"}
    finally:
        for process in started:
            os.killpg(process.pid, 15)
            process.wait(30)
