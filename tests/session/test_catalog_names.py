"""Queues and the home by catalog name (governed compute's way: managed tables, no path in the
user's code or conf), read and written through the engine. Producers held and released, and a
consumer, on a queue by name: the Qpid capacity example's engine run (tests/session/test_flow.py)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from support.stores import IO_SCHEMA, Io

from spark_flow.exceptions import ConfigurationError
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.home import HOME_CONF
from spark_flow.rules.storage_options import IO_OPTION
from spark_flow.spark.declare import declare
from spark_flow.spark.sink import QueueSink

SCHEMA = "id BIGINT, producer STRING"


@pytest.mark.parametrize("io", ["engine"], indirect=True)
def test_a_queue_its_state_and_its_home_are_tables_of_the_home_schema(spark: SparkSession, io: Io) -> None:
    """A queue named ``flow_io.events`` in the home ``flow_io``: the queue, its state and the
    home's registry are tables of the schema, found by name; the home's admin reads the queue
    by name; nothing is written at a path."""
    queue = declare(spark, io.queue("events"), SCHEMA, settings={"stopCount": 30, "resumeCount": 10})
    assert queue.path == f"spark_catalog.{IO_SCHEMA}.events"
    QueueSink(io.queue("events"), app_id="t")(spark.range(5).selectExpr("id", "'p' AS producer"), 0)
    assert queue.depths()["default"].count == 5

    assert {t.name for t in spark.catalog.listTables(IO_SCHEMA)} == {
        "events", f"{IO_SCHEMA}_events_subscriptions", "_spark_flow_queues"}
    admin = FlowAdmin(IO_SCHEMA, {IO_OPTION: "engine"})
    assert admin.queues() == {f"{IO_SCHEMA}.events": f"spark_catalog.{IO_SCHEMA}.events"}
    assert [sub.name for sub in admin.subscriptions(f"{IO_SCHEMA}.events")] == ["default"]
    assert admin.why(f"{IO_SCHEMA}.events") == [f"{IO_SCHEMA}.events: does not hold its producers (depth 5 messages, "
                                                 "45 bytes; stop 30 / resume 10 messages)"]
    assert sorted(path.name for path in io.base.iterdir()) == ["warehouse"], "nothing but the catalog's storage"


def test_a_home_naming_a_schema_not_in_the_catalog_is_refused_before_anything_is_made(spark: SparkSession) -> None:
    spark.conf.set(HOME_CONF, "no_such_schema")
    try:
        with pytest.raises(ConfigurationError, match=r"spark\.flow\.home.*no_such_schema.*CREATE SCHEMA no_such_schema"):
            declare(spark, "no_such_schema.events", SCHEMA)
    finally:
        spark.conf.unset(HOME_CONF)
    assert not spark.catalog.tableExists("no_such_schema.events")
