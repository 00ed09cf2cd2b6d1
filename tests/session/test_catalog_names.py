"""Queues and the home by catalog name (governed compute's way: managed tables, no path in the
user's code or conf but a checkpoint's), read and written through the engine. Producers held and released, and a
consumer, on a queue by name: the Qpid capacity example's engine run (tests/session/test_flow.py)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from support.docs import python_blocks
from support.stores import IO_SCHEMA, Io
from support.streams import wait_until

from spark_flow.controller.query import start_controller
from spark_flow.exceptions import ConfigurationError
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.home import HOME_CONF
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.spark.declare import declare
from spark_flow.spark.sink import QueueSink

SCHEMA = "id BIGINT, producer STRING"


@pytest.mark.parametrize("io", ["engine"], indirect=True)
def test_the_governed_pages_example_makes_queue_state_and_home_tables_of_the_home_schema(spark: SparkSession,
                                                                                      io: Io) -> None:
    """docs/deployment.md's example as written (its schema the test's, its volume a directory): the
    queue, its state and the home's registry are tables of the schema, found by name; the home's
    admin reads the queue by name; nothing is written at a path but the checkpoint."""
    [example] = python_blocks("docs/deployment.md", "Governed compute and where spark-flow runs")
    spark.range(5).selectExpr("id", "concat('m', id) AS body").write.format("delta").saveAsTable(f"{IO_SCHEMA}.input")
    namespace = {"spark": spark, "declare": declare, "QueueSink": QueueSink,
                 "messages": spark.readStream.table(f"{IO_SCHEMA}.input")}
    exec(example.replace("main.flow", IO_SCHEMA).replace("/Volumes/main/flow/checkpoints", str(io.base / "volume")),
         namespace)
    namespace["query"].awaitTermination()

    queue = f"{IO_SCHEMA}.events"
    assert {t.name for t in spark.catalog.listTables(IO_SCHEMA)} == {
        "input", "events", f"{IO_SCHEMA}_events_subscriptions", "_spark_flow_queues"}
    admin = FlowAdmin(IO_SCHEMA, {IO_OPTION: "engine"})
    assert admin.queues() == {queue: f"spark_catalog.{queue}"}
    assert [sub.name for sub in admin.subscriptions(queue)] == ["default"]
    assert admin.why(queue) == [f"{queue}: does not hold its producers (depth 5 messages, 50 bytes; stop 900 / "
                                "resume 500 messages)"]
    assert sorted(path.name for path in io.base.iterdir()) == ["volume", "warehouse"], "no path but the checkpoint"


def test_a_home_naming_a_schema_not_in_the_catalog_is_refused_before_anything_is_made(spark: SparkSession) -> None:
    spark.conf.set(HOME_CONF, "no_such_schema")
    try:
        with pytest.raises(ConfigurationError, match=r"spark\.flow\.home.*no_such_schema.*CREATE SCHEMA no_such_schema"):
            declare(spark, "no_such_schema.events", SCHEMA)
    finally:
        spark.conf.unset(HOME_CONF)
    assert not spark.catalog.tableExists("no_such_schema.events")


@pytest.mark.parametrize("io", ["engine"], indirect=True)
def test_a_queue_by_name_is_deleted_with_its_state_tables_and_registration(spark: SparkSession, io: Io) -> None:
    """``delete`` of a queue declared by name in a schema home drops its table and its state
    tables and unregisters it (on main it was refused as a catalog table whose entry only Spark
    can drop, which the engine here does); a queue whose table was dropped by hand has its state
    and registration deleted the same way."""
    kept, dropped = io.queue("events"), io.queue("orders")
    for queue in (kept, dropped):
        declare(spark, queue, SCHEMA)
    admin = FlowAdmin(IO_SCHEMA, {IO_OPTION: "engine"})
    admin.queue(kept).create_subscription("audit")
    admin.set(kept, stopCount=10)  # its run-time settings table too

    deleted = admin.delete_queue(kept, if_empty=True, if_unused=True)
    assert (deleted.path, deleted.state_location) == (f"spark_catalog.{kept}", f"{IO_SCHEMA}.{IO_SCHEMA}_events")
    spark.sql(f"DROP TABLE {dropped}")
    assert admin.delete_queue(dropped).state_location == f"{IO_SCHEMA}.{IO_SCHEMA}_orders"
    left = [t.name for t in spark.catalog.listTables(IO_SCHEMA)]
    assert left and all(name.startswith("_spark_flow_") for name in left), left  # the home's own tables only
    assert admin.queues() == {}


@pytest.mark.parametrize("io", ["engine"], indirect=True)
def test_a_queue_whose_state_tables_would_be_another_queues_is_refused(spark: SparkSession, io: Io) -> None:
    """A schema home names a queue's state tables after it, ``.`` made ``_``: queue
    ``flow_io.events`` and a queue at a path named ``flow_io_events`` would share
    ``flow_io.flow_io_events_subscriptions`` (on main the second took the first's subscriptions
    for its own). Refused before anything is made, naming the other queue."""
    declare(spark, io.queue("events"), SCHEMA)
    clash = io.base / "flow_io_events"
    with pytest.raises(ConfigurationError, match=r"queue='flow_io_events'.*queue 'flow_io\.events''s"):
        declare(spark, str(clash), SCHEMA)
    assert not clash.exists()


@pytest.mark.parametrize("io", ["engine"], indirect=True)
def test_the_controller_of_a_schema_home_looks_through_the_engine(spark: SparkSession, io: Io) -> None:
    """Governed compute's controller (on main its looks ran in a Python worker, which has no
    session and, there, no credentials): a queue by name filled over its stop (no producer
    looks) is stopped by the controller and shown held in the status table; acknowledged, it is
    resumed by the controller, and both are in the queue's history; a schema home's controller
    needs a checkpoint path."""
    queue = io.queue("events")
    declare(spark, queue, SCHEMA, settings={"stopCount": 5, "resumeCount": 2})
    spark.range(8).selectExpr("id", "'p' AS producer").write.format("delta").mode("append").saveAsTable(queue)
    with pytest.raises(ConfigurationError, match="checkpoint_location"):
        start_controller(spark)
    controller = start_controller(spark, checkpoint_location=str(io.base / "volume" / "controller"), trigger="500 milliseconds")
    try:
        admin = FlowAdmin(IO_SCHEMA, {IO_OPTION: "engine"})

        def shown() -> dict[str, object]:
            rows = admin.status(queue).to_dict("records")
            return rows[0] if rows else {}

        wait_until(lambda: shown().get("depth_count") == 8 and shown().get("flow_stopped") is True, 120)
        handle = admin.queue(queue)
        handle.acknowledge("default", handle.refresh())
        wait_until(lambda: shown().get("flow_stopped") is False, 120)
    finally:
        controller.stop()
    assert [(row["flow_stopped"], row["flow_stopped_count"]) for row in handle.history.read()] == [
        (True, 1), (False, 1)]
    assert shown()["depth_count"] == 0
