"""A scrape of a big home (issue 46, item 6): ``spark-flow serve`` answers within the timeout
Prometheus sends it even while the look it would serve cannot end in time (serve's first look of
10,000 queues opens every table: about a minute), and the shipped prometheus.yml says its
timeout rather than leaving Prometheus' default implied. How fast a scrape is at 1,000 and
10,000 queues is ``bench/scrape.py``'s, not a test's."""

from __future__ import annotations

from pathlib import Path

import yaml
from support.homes import home_of_one_queue, http, serving

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


def test_the_shipped_prometheus_yml_says_its_scrape_timeout() -> None:
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    job = next(job for job in config["scrape_configs"] if job["job_name"] == "spark-flow")
    timeout = job.get("scrape_timeout", config["global"].get("scrape_timeout"))
    assert timeout is not None and timeout.endswith("s") and float(timeout[:-1]) <= float(config["global"]["scrape_interval"][:-1])
