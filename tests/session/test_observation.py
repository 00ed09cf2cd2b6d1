"""The controller's source looks at the queues in its long-lived process and keeps their handles
open between micro-batches: whatever changes on a queue between two of its batches is in the
next one's observation (a real controller on real Delta tables)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from support.streams import status_of, wait_until

from spark_flow.controller.query import start_controller, stop_between_batches
from spark_flow.ops.admin import FlowAdmin
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState
from spark_flow.spark.declare import declare

SCHEMA = "id BIGINT, body STRING"


def test_changes_between_controller_batches_are_seen(spark: SparkSession, tmp_path: Path) -> None:
    home, path = str(tmp_path / "home"), str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    admin = FlowAdmin(home)
    admin.register(path)
    controller = start_controller(spark, home, checkpoint_location=str(tmp_path / "controller"),
                                  trigger="200 milliseconds")

    def shows(*expected: tuple[str, str, str, object]) -> bool:
        """Whether the status table shows every (queue, subscription, column, value)."""
        rows = {(r["queue"], r["subscription"]): r for r in admin.status().to_dict("records")}
        return all(rows.get((q, s), {}).get(column) == value for q, s, column, value in expected)

    try:
        wait_until(lambda: shows(("q", "default", "depth_count", 0)), 60)  # the queue's handles are open
        spark.range(3).selectExpr("id", "'m' AS body").write.format("delta").mode("append").save(path)
        wait_until(lambda: shows(("q", "default", "depth_count", 3)), 60)  # a new commit

        # Changes of every other kind between two batches, each seen by the next look.
        queue.acknowledge("default", queue.refresh())  # a new ack position
        queue.create_subscription("late")  # a new subscription
        queue.runtime_settings.apply({"stopCount": "10"}, 0)  # the first run-time setting makes the table
        declare(spark, path, SCHEMA, settings={"resumeCount": 3})  # a table property changed
        declare(spark, str(tmp_path / "q2"), SCHEMA)
        admin.register(str(tmp_path / "q2"))  # a queue registered
        wait_until(lambda: shows(("q", "default", "depth_count", 0), ("q", "late", "depth_count", 3),
                                 ("q", "default", "stop_count", 10), ("q", "default", "resume_count", 3),
                                 ("q2", "default", "depth_count", 0)), 60)

        late = queue.subscriptions.get("late")  # watched, not stopped: a gate stops it
        assert queue.recorder.record(late, FlowState(True, 1), Depth(3), queue.settings().thresholds)
        wait_until(lambda: shows(("q", "late", "flow_stopped", True)), 60)
    finally:
        stop_between_batches(controller)
    late = status_of(admin, "q", "late")
    assert (late["flow_stopped"], late["flow_stopped_count"]) == (True, 1), "adopted, not counted again"
