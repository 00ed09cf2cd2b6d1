"""A scrape of a big home (issue 46, item 6): the shipped prometheus.yml says its scrape timeout
(``spark-flow serve`` answers within the one Prometheus sends) rather than leaving Prometheus'
default implied. How fast a scrape is at 1,000 and 10,000 queues is ``bench/scrape.py``'s."""

from __future__ import annotations

from pathlib import Path

import yaml

PROMETHEUS_YML = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus.yml"


def test_the_shipped_prometheus_yml_says_its_scrape_timeout() -> None:
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    job = next(job for job in config["scrape_configs"] if job["job_name"] == "spark-flow")
    timeout = job.get("scrape_timeout", config["global"].get("scrape_timeout"))
    assert timeout is not None and timeout.endswith("s") and float(timeout[:-1]) <= float(config["global"]["scrape_interval"][:-1])
