"""A scrape of a big home (issue 46, item 6): ``spark-flow serve`` answers within the timeout
Prometheus sends it even while the look it would serve cannot end in time (serve's first look of
10,000 queues opens every table: about a minute), and the shipped prometheus.yml says its
timeout rather than leaving Prometheus' default implied. How fast a scrape is at 1,000 and
10,000 queues is ``bench/scrape.py``'s, not a test's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.homes import enqueue, home_of_one_queue, http, look_as_a_producer, make_queue, serving

from spark_flow.console import looker

PROMETHEUS_YML = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus.yml"


def test_a_scrape_answers_within_its_timeout_while_no_look_can_end(tmp_path: Path) -> None:
    """The home's reader is busy (its lock held, as an action holds it) when the first scrape
    comes: the answer comes within the scrape's timeout, with how long it waited and no queue
    (the old serve waited for its look however long: Prometheus' timeout failed the scrape)."""
    home = home_of_one_queue(tmp_path, 8)
    with serving(home) as server:
        with server.looker.lock:
            status, text = http(f"{server.url}metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "2"})
        assert status == 200 and "spark_flow_scrape_duration_seconds{" in text, text
        assert "spark_flow_depth_messages" not in text and "spark_flow_home_up" not in text
        status, text = http(f"{server.url}metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
        assert status == 200 and f'spark_flow_depth_messages{{home="{home}",queue="events",subscription="default"}} 8.0' in text


def test_a_page_asking_once_its_look_is_stale_sees_the_home_as_it_is_now(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A small home's looks are short: a page whose look went stale (here at once) waits for a
    look of its own, as a scrape does, instead of being shown the stale one (CI: a console opened
    after its queue was held showed it flowing, as ``serve`` read it at start)."""
    monkeypatch.setattr(looker, "FRESH", 0.0)
    home = str(tmp_path / "home")
    queue = make_queue(home, "events", {"stopCount": 5})
    with serving(home) as server:
        def held() -> bool:
            status, text = http(f"{server.url}api/overview")
            assert status == 200, text
            return bool(json.loads(text)["queues"][0]["held"])

        assert not held()
        enqueue(queue, 8)
        look_as_a_producer(queue)
        assert held()


def test_the_shipped_prometheus_yml_says_its_scrape_timeout() -> None:
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    job = next(job for job in config["scrape_configs"] if job["job_name"] == "spark-flow")
    timeout = job.get("scrape_timeout", config["global"].get("scrape_timeout"))
    assert timeout is not None and timeout.endswith("s") and float(timeout[:-1]) <= float(config["global"]["scrape_interval"][:-1])
