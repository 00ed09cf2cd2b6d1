"""The console at the size of a home (issue 46, item 6): a page of rows, the queues that need an
operator first, search, filters and pages done by the server; a pipeline graph of the chains that
matter laid out in layers, as big as a screen whatever the home's size; a refresh that finds
nothing changed answered ``same``. Served by ``spark-flow serve`` in this process over a home of
63 queues written by deltalake and real gates (no Spark), in the suite's Chromium; the graph's
bound from a look of 10,000 queues made in memory. How fast at 1,000 and 10,000 queues is
``bench/console.py``'s, not a test's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

import pytest
from selenium.webdriver.common.by import By
from support.homes import chain, enqueue, http, look_as_a_producer, make_queue, serving
from support.pages import rows, shown, wait

from spark_flow.console.graph import MAX_NODES, pipeline_graph
from spark_flow.ops.view import QueueView
from spark_flow.records.home import Registry

QUEUES = 60  # and a chain of three: more than a page of 50
HELD = {f"queue{i:02d}" for i in range(0, QUEUES, 10)}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """60 queues of 3 messages, every tenth held by its depth (stop 2), registered in one commit;
    and a chain ``ingest -> events -> enriched`` held from its end."""
    home = str(tmp_path_factory.mktemp("scale") / "home")

    def one(i: int) -> tuple[str, str]:
        queue = make_queue(home, f"queue{i:02d}", {"stopCount": 2 if f"queue{i:02d}" in HELD else 100}, register=False)
        enqueue(queue, 3)
        look_as_a_producer(queue)
        return queue.name, queue.path

    with ThreadPoolExecutor(8) as pool:
        Registry(home).register_all(dict(pool.map(one, range(QUEUES))))
    chain(home, ["ingest", "events", "enriched"])
    yield home


def overview(url: str, **params: str) -> dict[str, Any]:
    status, text = http(f"{url}api/overview?{urlencode(params)}")
    assert status == 200, text
    answer: dict[str, Any] = json.loads(text)
    return answer


def test_a_refresh_is_one_page_held_first_searched_and_filtered_by_the_server(home: str) -> None:
    """The old console sent every queue at every refresh (8.8 s to draw 1,000 rows)."""
    with serving(home) as server:
        first = overview(server.url)
        names = [q["name"] for q in first["queues"]]
        assert len(names) == 50 and first["list"]["matching"] == QUEUES + 3 and first["list"]["pages"] == 2
        assert names[0] == "enriched" and set(names[1:9]) == HELD | {"events", "ingest"}  # the root cause, then the held
        assert first["list"]["counts"] == {"all": 63, "attention": 9, "held": 9, "stalled": 0, "unreadable": 0,
                                           "flowing": 54}
        second = overview(server.url, page="1")
        assert len(second["queues"]) == 13 and not {q["name"] for q in second["queues"]} & set(names)
        assert [q["name"] for q in overview(server.url, search="QUEUE1")["queues"]] == ["queue10", *(
            f"queue{i}" for i in range(11, 20))]
        held = overview(server.url, show="held", search="queue")["queues"]
        assert {q["name"] for q in held} == HELD and all(q["held"] for q in held)
        assert overview(server.url, page="9")["list"]["page"] == 1  # past the end: the last page
        status, text = http(f"{server.url}api/overview?show=stuck")
        assert status == 400 and json.loads(text)["error"].startswith("show='stuck' is not valid: allowed is all, attention")


def test_a_refresh_that_finds_nothing_changed_is_answered_same(home: str) -> None:
    """The old console read the home and sent it whole at every refresh of every open page: one
    tab cost the server 64% of a core at 1,000 queues."""
    with serving(home) as server:
        first = overview(server.url)
        again = overview(server.url, seen=first["digest"])
        assert again == {"same": True, "at": again["at"], "read_from": "tables", "digest": first["digest"],
                         "token_needed": False}
        assert overview(server.url, seen=first["digest"], page="1")["queues"]  # another page: drawn


def test_the_graph_draws_the_chains_that_matter_in_layers(home: str) -> None:
    """The old graph put every queue of the home in one column (80,030 px tall at 1,000 queues)."""
    with serving(home) as server:
        graph = overview(server.url)["graph"]
        at = {node["name"]: (node["column"], node["row"]) for node in graph["nodes"]}
        assert set(at) == HELD | {"ingest", "events", "enriched"}  # a calm queue alone is in the list only
        assert [at[name][0] for name in ("ingest", "events", "enriched")] == [0, 1, 2]
        assert len({at[name][1] for name in ("ingest", "events", "enriched")}) == 1
        assert graph["rows"] <= 3 and graph["columns"] <= 6
        assert {(e["from"], e["to"]) for e in graph["edges"]} == {("ingest", "events"), ("events", "enriched")}
        selected = overview(server.url, selected="queue01")["graph"]  # a calm queue selected: drawn too
        assert "queue01" in {node["name"] for node in selected["nodes"]}


def test_the_page_shows_a_page_and_searches_filters_and_turns_it(browser: Any, home: str) -> None:
    with serving(home) as server:
        browser.get(server.url)
        table = wait(browser, lambda d: rows(d) or None)
        assert len(table) == 50 and "63" in browser.find_element(By.ID, "page-info").text
        order = browser.execute_script('return [...document.querySelectorAll("tr.queue")].map((r) => r.dataset.queue)')
        assert order[0] == "enriched" and set(order[1:9]) == HELD | {"events", "ingest"}
        height = browser.execute_script('return document.getElementById("pipeline").getBoundingClientRect().height')
        assert height < 400, height  # three rows of chains, not a column of 63 queues
        nodes = shown(browser, "#pipeline g.node")
        assert "root-cause" in nodes["enriched"]["classes"] and len(nodes) == 9

        browser.find_element(By.ID, "next").click()
        wait(browser, lambda d: len(rows(d)) == 13)
        browser.find_element(By.ID, "search").send_keys("queue4")
        wait(browser, lambda d: sorted(rows(d)) == [f"queue4{i}" for i in range(10)])
        browser.find_element(By.CSS_SELECTOR, '#show option[value="held"]').click()
        wait(browser, lambda d: list(rows(d)) == ["queue40"])
        assert browser.find_element(By.CSS_SELECTOR, '#show option[value="held"]').text == "holding producers (9)"


def test_the_graph_of_10000_queues_is_a_screen_s_size() -> None:
    """Laid out from a look of 10,000 queues (1,000 held alone, a chain of three held from its
    end): the chain first, in three layers, then held queues up to 60 drawn; the rest counted."""
    names = [f"q{i:05d}" for i in range(10_000)]
    queues = {name: QueueView(name, f"/q/{name}", held=i % 10 == 0) for i, name in enumerate(names)}
    edges = [("q00001", "default", "q00002", False), ("q00002", "default", "q00003", True)]
    queues["q00003"] = QueueView("q00003", "/q/q00003", held=True)
    graph = pipeline_graph(queues, edges, {"q00003": ["its consumer is not running"]})
    at = {node["name"]: (node["column"], node["row"]) for node in graph["nodes"]}
    assert len(at) == MAX_NODES and [at[n] for n in ("q00001", "q00002", "q00003")] == [(0, 0), (1, 0), (2, 0)]
    assert graph["hidden_chains"] == 1_000 - (MAX_NODES - 3) and graph["hidden_queues"] == graph["hidden_chains"]
    assert graph["columns"] <= 6 and graph["rows"] <= MAX_NODES // 6 + 1
