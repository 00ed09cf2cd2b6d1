"""What ``spark-flow serve`` answers a scrape and a console page with while its first look at a big
home is under way (it opens every queue's tables: a minute at 10,000 queues): the controller's last
look, read from the status table alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from support.homes import http, serving

from spark_flow.console.listing import ListQuery
from spark_flow.console.looker import Looker
from spark_flow.console.overview import Overview
from spark_flow.controller.query import start_controller
from spark_flow.ops.admin import FlowAdmin
from spark_flow.ops.metrics import series
from spark_flow.ops.view import look
from spark_flow.spark.declare import declare

SCHEMA = "id BIGINT, body STRING"
#: Series a look has and the status table does not keep (serve leaves them out rather than guess),
#: and those that differ by when each was read.
NOT_KEPT = {"spark_flow_max_messages", "spark_flow_consumer_backpressured"}
BY_WHEN = {"spark_flow_oldest_message_age_seconds", "spark_flow_drain_messages_per_second",
           "spark_flow_status_updated_timestamp_seconds", "spark_flow_scrape_duration_seconds",
           "spark_flow_look_age_seconds"}


def test_a_scrape_and_a_page_during_serve_s_first_look_get_the_controller_s_last_look(
        spark: SparkSession, tmp_path: Path) -> None:
    """A held queue with two subscriptions and a calm one, a controller's scheduled run: while
    serve's first look holds the home's tables, a scrape waits a second for it, then gets every
    figure the status table keeps, as a look gives it, and how old it is. The transitions'
    times too: the controller records its transition at its step's time, which its status row
    says (it recorded its write's, seconds later). A console page's list gets the same rows."""
    home = str(tmp_path / "home")
    admin = FlowAdmin(home)
    held = declare(spark, str(tmp_path / "held"), SCHEMA, settings={"stopCount": 5, "resumeCount": 2, "maxCount": 50})
    held.create_subscription("audit", "latest")
    calm = declare(spark, str(tmp_path / "calm"), SCHEMA)
    for queue, count in ((held, 10), (calm, 2)):
        admin.register(queue.path)
        spark.range(count).selectExpr("id", "'x' AS body").write.format("delta").mode("append").save(queue.path)
    controller = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"),
                                  trigger={"availableNow": True})
    assert controller.awaitTermination(120) and controller.exception() is None

    looker = Looker(home, {})
    with looker.lock:  # serve's first look under way: it holds the tables until it ends
        served = looker.for_scrape(9.0)
        looked = look(home)
    assert served is not None
    view, took, age = served

    def figures(found: dict[tuple[str, str], list[tuple[tuple[str, ...], float]]]) -> dict[tuple[str, str], list]:
        return {key: sorted(rows) for key, rows in found.items() if rows and key[0] not in NOT_KEPT | BY_WHEN}

    assert figures(series(view)) == figures(series(looked))
    assert figures(series(view))[("spark_flow_flow_stopped", "counter")] == [
        ((home, "calm", "default"), 0.0), ((home, "held", "audit"), 1.0), ((home, "held", "default"), 1.0)]
    assert not {key[0] for key, rows in series(view).items() if rows} & NOT_KEPT
    assert 0 <= age <= (datetime.now(UTC) - view.at).total_seconds() and took < 5

    # A console page then: its list from the same status rows, no root cause marked (the status
    # table keeps no chains); on main it waited for the first look, here for ever.
    with serving(home) as server, server.looker.lock:
        status, text = http(f"{server.url}api/overview")
    assert status == 200, text
    page, tables = json.loads(text), Overview(looked, read_only=False).answer(ListQuery(), None)

    def rows(answer: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(q["name"], q["held"], q["depth"], q["thresholds"], [s["flow_stopped_count"] for s in q["subscriptions"]])
                for q in answer["queues"]]

    assert (page["read_from"], tables["read_from"]) == ("status", "tables")
    assert rows(page) == rows(tables) and [q["name"] for q in page["queues"]] == ["held", "calm"]
    assert [q["root_cause"] for q in page["queues"]] == [[], []] != [q["root_cause"] for q in tables["queues"]]
