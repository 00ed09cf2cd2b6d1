"""The controller's source looks at the queues in its long-lived process and keeps their handles
open between micro-batches: whatever changes on a queue between two of its batches is in the
next one's observation (a real controller on real Delta tables)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from streams import status_of, wait_until

from spark_flow.admin import FlowAdmin
from spark_flow.controller import start_controller, stop_between_batches
from spark_flow.ledger import Depth
from spark_flow.queue import declare
from spark_flow.state import FlowState

SCHEMA = "id BIGINT, body STRING"


def test_changes_between_controller_batches_are_seen(spark: SparkSession, tmp_path: Path) -> None:
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    admin = FlowAdmin(home)
    admin.register(path)
    controller = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"),
                                  trigger="200 milliseconds")
    try:
        wait_until(lambda: status_of(admin, "q").get("depth_count") == 0, 60)  # the queue's handles are open
        spark.range(3).selectExpr("id", "'m' AS body").write.format("delta").mode("append").save(path)
        wait_until(lambda: status_of(admin, "q").get("depth_count") == 3, 60)  # a new commit

        queue.acknowledge("default", queue.refresh())
        wait_until(lambda: status_of(admin, "q").get("depth_count") == 0, 60)  # a new ack position
        queue.create_subscription("late")
        wait_until(lambda: status_of(admin, "q", "late").get("depth_count") == 3, 60)  # a new subscription

        late = queue.subscriptions.get("late")
        assert queue.transition(late, FlowState(True, 1), Depth(3), queue.settings().thresholds)  # as a gate does
        wait_until(lambda: status_of(admin, "q", "late").get("flow_stopped") is True, 60)

        queue.overrides.apply({"stopCount": "10"}, 0)  # the first run-time setting makes the table
        wait_until(lambda: status_of(admin, "q").get("stop_count") == 10, 60)
        declare(spark, path, SCHEMA, settings={"resumeCount": 3})  # a table property changed
        wait_until(lambda: status_of(admin, "q").get("resume_count") == 3, 60)

        declare(spark, str(tmp_path / "q2"), SCHEMA)
        admin.register(str(tmp_path / "q2"))
        wait_until(lambda: status_of(admin, "q2").get("depth_count") == 0, 60)  # a queue registered
    finally:
        stop_between_batches(controller)
    late = status_of(admin, "q", "late")
    assert (late["flow_stopped"], late["flow_stopped_count"]) == (True, 1), "adopted, not counted again"
