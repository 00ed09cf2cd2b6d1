"""The producer and consumer jobs, run as users run them: spark-submit on the pip-installed Spark,
and the conf files they are run with.

Each job is a process of its own (marked processes); results are read back with deltalake, so the
module needs no SparkSession of its own.
"""

from __future__ import annotations

from pathlib import Path

from support.processes import ROOT

from spark_flow.rules.keys import conf_settings
from spark_flow.rules.settings import QueueSettings, producer_settings, queue_settings


def properties(path: Path) -> dict[str, str]:
    """A Spark properties file's entries (``key  value`` lines, ``#`` comments)."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split(None, 1) for line in lines if line and not line.startswith("#"))


def test_a_bare_number_is_milliseconds_for_a_job_flag_and_a_conf_key() -> None:
    """One duration parser for the jobs and the package, with the configuration reference's rule: a plain number
    is milliseconds, whether it is a job's flag or a ``spark.flow.*`` key."""
    import consumer

    args = consumer.parse_args(["--queue", "q", "--output", "o", "--trigger", "500",
                                "--min-records-per-trigger", "5", "--max-trigger-delay", "1500"])
    assert (args.trigger, args.max_trigger_delay) == ("500 milliseconds", 1.5)
    assert producer_settings("q", conf={"spark.flow.pollInterval": "500"}).poll_interval == 0.5
    assert consumer.parse_args(["--queue", "q", "--output", "o", "--trigger", "2 seconds"]).trigger == "2000 milliseconds"


def test_queues_conf_sets_each_queue_as_its_comments_say() -> None:
    conf = {**properties(ROOT / "conf" / "spark-defaults.conf"), **properties(ROOT / "conf" / "queues.conf")}

    def queue(name: str) -> QueueSettings:  # what a job with this conf records for a new queue
        return queue_settings(name, dict(conf_settings(name, conf, "queue").values()))

    eu, us = queue("orders.eu"), queue("orders.us")
    assert (eu.thresholds.stop_count, eu.thresholds.resume_count) == (1000, 800)
    assert (us.thresholds.stop_count, us.thresholds.resume_count) == (5000, 4000)
    assert producer_settings("orders.eu", conf=conf).capacity == 200
    assert producer_settings("orders.us", conf=conf).capacity == 10_000
    audit = queue("billing.audit").thresholds
    assert (audit.stop_count, audit.stop_size, audit.resume_size) == (0, 64 * 2**20, 48 * 2**20)
    telemetry = queue("telemetry.eu.west")
    assert telemetry.policy == "ring" and telemetry.max_count == 100_000 and not telemetry.thresholds.enabled
    clicks = producer_settings("clicks", conf=conf)
    assert (clicks.on_full, clicks.reject_timeout, queue("clicks").thresholds.stop_count) == ("reject-after", 30.0, 10_000)
    for unmatched in ("orders", "audit", "eu.billing.audit"):
        assert not queue(unmatched).thresholds.enabled, unmatched
