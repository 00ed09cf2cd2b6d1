"""The console in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium), served by ``spark-flow serve`` in this process over homes written by deltalake and
real gates (no Spark; the action that holds a running producer is in test_monitoring)."""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from support.homes import enqueue, look_as_a_producer, make_queue, serving
from support.pages import classes, click, rows, shown, wait

from spark_flow.ops.admin import FlowAdmin

TOKEN = "a-token-of-thirty-two-characters"


def test_a_held_queue_is_shown_held_with_its_chart(browser: Any, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    held = make_queue(home, "events", {"stopCount": 5, "resumeCount": 2})
    enqueue(held, 8)
    look_as_a_producer(held)
    enqueue(make_queue(home, "quiet", {"stopCount": 100}), 3)
    with serving(home) as server:
        browser.get(server.url)
        table = wait(browser, lambda d: rows(d) if len(rows(d)) == 2 else None)
        assert "held" in table["events"]["classes"] and "held" not in table["quiet"]["classes"]
        assert [table["events"]["cells"][i] for i in (1, 2, 4, 5)] == ["8", "80", "5 / 2", "held"]
        assert table["quiet"]["cells"][5] == "flowing"
        node = shown(browser, "#pipeline g.node")["events"]
        assert {"held", "root-cause"} <= node["classes"]  # nothing below it: its own consumer is the cause
        click(browser, 'tr.queue[data-queue="events"] td.name')
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart rect.held"))
        assert browser.find_element(By.CSS_SELECTOR, "#chart path.stop").get_attribute("d")
        assert browser.find_element(By.ID, "detail-title").text == "queue events"
        assert browser.find_element(By.CSS_SELECTOR, "#why li.root").text.startswith("events: holds its producers")


def test_the_root_cause_is_marked_in_a_three_queue_chain(browser: Any, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    queues = [make_queue(home, name, {"stopCount": 5}) for name in ("ingest", "events", "enriched")]
    for upper, lower in itertools.pairwise(queues):
        upper.subscriptions.add_downstream("default", [lower.path])
    for queue in queues:
        enqueue(queue, 8)
        look_as_a_producer(queue)
    with serving(home) as server:
        browser.get(server.url)
        nodes = wait(browser, lambda d: shown(d, "#pipeline g.node") if len(shown(d, "#pipeline g.node")) == 3 else None)
        assert {name for name, node in nodes.items() if "root-cause" in node["classes"]} == {"enriched"}
        assert all("held" in node["classes"] for node in nodes.values())
        edges = browser.execute_script("""return [...document.querySelectorAll("#pipeline line.edge.backpressure")]
            .map((e) => [e.getAttribute("data-from"), e.getAttribute("data-to")]);""")
        assert sorted(edges) == [["events", "enriched"], ["ingest", "events"]]
        table = rows(browser)
        assert table["enriched"]["cells"][0] == "enrichedroot cause" and table["ingest"]["cells"][0] == "ingest"
        click(browser, 'tr.queue[data-queue="ingest"] td.name')
        why = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#why li") if len(d.find_elements(By.CSS_SELECTOR, "#why li")) == 3 else None)
        assert [li.get_attribute("data-queue") for li in why] == ["ingest", "events", "enriched"]
        assert [classes(li) for li in why] == [set(), set(), {"root"}]
        assert "root cause: the consumer of subscription default" in why[2].text


def post_from_the_page(browser: Any, token: str | None = None) -> dict[str, Any]:
    """An action posted by script from the console's own page, with its CSRF token."""
    script = """
        const done = arguments[arguments.length - 1];
        const headers = {"Content-Type": "application/json",
                         "X-CSRF-Token": document.querySelector('meta[name="csrf-token"]').content};
        if (arguments[0]) headers.Authorization = "Bearer " + arguments[0];
        fetch("/api/action", {method: "POST", headers,
                              body: JSON.stringify({action: "stop-producers", target: "events"})})
          .then(async (r) => done({status: r.status, body: await r.text()}));
    """
    return browser.execute_async_script(script, token)


def test_a_read_only_console_has_no_action(browser: Any, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    make_queue(home, "events")
    with serving(home, read_only=True) as server:
        browser.get(server.url)
        wait(browser, rows)
        assert browser.find_elements(By.CSS_SELECTOR, "button, dialog, input, td.actions, th.actions") == []
        assert browser.find_element(By.ID, "mode").text == "read-only"
        answer = post_from_the_page(browser)
        assert answer["status"] == 403 and "read-only" in answer["body"]
    assert FlowAdmin(home).commands.read() == []


def test_an_action_is_confirmed_first_and_refused_without_the_token(browser: Any, tmp_path: Path) -> None:
    """Bound elsewhere than loopback: the confirmation asks for the token; without it the action
    is refused and nothing is written; cancelled, nothing is sent; with it, the command is issued."""
    home = str(tmp_path / "home")
    make_queue(home, "events")
    admin = FlowAdmin(home)
    with serving(home, bind="0.0.0.0", token=TOKEN) as server:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        stop = 'button.action[data-action="stop-producers"][data-queue="events"]'
        click(browser, stop)
        dialog = browser.find_element(By.ID, "confirm")
        assert dialog.is_displayed() and "Stop every producer of queue events" in dialog.text
        assert browser.find_element(By.ID, "token").is_displayed()
        browser.find_element(By.ID, "confirm-no").click()
        assert not dialog.is_displayed() and admin.commands.read() == []

        click(browser, stop)
        browser.find_element(By.ID, "confirm-yes").click()  # no token given
        message = wait(browser, lambda d: d.find_element(By.ID, "message") if d.find_element(By.ID, "message").text else None)
        assert message.text == "refused: an action needs this console's token" and "error" in classes(message)
        assert post_from_the_page(browser)["status"] == 401
        assert admin.commands.read() == []

        click(browser, stop)
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "confirm-yes").click()
        wait(browser, lambda d: "ok" in classes(d.find_element(By.ID, "message")))
        assert [(c.command, c.target) for c in admin.commands.read()] == [("stop-producers", "events")]
        assert TOKEN not in browser.page_source


def test_set_and_unset_from_the_console(browser: Any, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    make_queue(home, "events", {"stopCount": 50})
    admin = FlowAdmin(home)
    with serving(home) as server:
        browser.get(server.url)
        click(browser, 'button.action[data-action="set"]')
        browser.find_element(By.ID, "setting-key").send_keys("stopCount")
        browser.find_element(By.ID, "setting-value").send_keys("900")
        browser.find_element(By.ID, "confirm-yes").click()
        wait(browser, lambda d: "ok" in classes(d.find_element(By.ID, "message")))
        click(browser, 'button.action[data-action="unset"]')
        browser.find_element(By.ID, "setting-key").send_keys("stopCount")
        browser.find_element(By.ID, "confirm-yes").click()
        wait(browser, lambda d: d.find_element(By.ID, "message").text.startswith("command 1"))
    assert [(c.command, json.dumps(dict(c.settings))) for c in admin.commands.read()] == [
        ("set", '{"stopCount": "900"}'), ("unset", '{"stopCount": null}')]


def test_a_page_left_open_asks_whatever_takes_its_servers_port(browser: Any, tmp_path: Path) -> None:
    """A console page asks its server every 2 s; once the server is gone, whatever listens on its
    port next gets those requests (CI: a Spark JVM's socket for a new Python worker read one as
    the worker's secret, ``GET `` as its length, 1.2 GB: "Java heap space"). So the ``browser``
    fixture leaves every test on a blank page."""
    home = str(tmp_path / "home")
    enqueue(make_queue(home, "events", {"stopCount": 5}), 1)
    with serving(home) as server:
        browser.get(server.url)
        wait(browser, lambda d: rows(d) or None)
        port = server.server_address[1]
    with socket.create_server(("127.0.0.1", port)) as listener:
        listener.settimeout(30)
        request, _ = listener.accept()
        with request:
            assert request.recv(4) == b"GET "
