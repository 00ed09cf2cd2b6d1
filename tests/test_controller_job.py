"""The controller job under spark-submit: it stops a deep queue, applies a queued operator
command, and writes the status table the CLI reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from processes import failure, progress, spark_submit
from pyspark.sql import SparkSession

from spark_flow.admin import FlowAdmin
from spark_flow.queue import declare

pytestmark = pytest.mark.processes


def test_controller_job_stops_a_deep_queue_and_applies_commands(spark: SparkSession, tmp_path: Path) -> None:
    home, path = str(tmp_path / "home"), str(tmp_path / "jq")
    queue = declare(spark, path, "id BIGINT", settings={"stopCount": 5, "resumeCount": 2})
    admin = FlowAdmin(home)
    admin.register(path)
    spark.range(10).write.format("delta").mode("append").save(path)
    command = admin.stop_producers("jq")  # issued while no controller runs: applied when it starts

    result = spark_submit("controller", "--run-seconds", "15", "--trigger", "500ms", conf={"spark.flow.home": home})
    assert result.returncode == 0, failure(result)
    lines = progress(result.stdout, "controller")
    assert lines, failure(result)
    assert lines[-1]["flowStopped"] == "jq/default" and lines[-1]["held"] == "jq"

    status = admin.status().to_dict("records")
    assert [(r["queue"], r["depth_count"], r["flow_stopped"], r["flow_stopped_count"], r["producers_stopped"])
            for r in status] == [("jq", 10, True, 1, True)]
    assert queue.subscriptions.get("default").flow_stopped_count == 1
    events = [(r["event"], r["detail"]) for r in admin.history("jq") if r["event"] != "sample"]
    assert ("command", f"command {command}: stop-producers") in events and ("stopped", "controller") in events
