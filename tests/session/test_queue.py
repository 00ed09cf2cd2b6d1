"""Queues: declaring a Delta table as one, its subscriptions, and its exact depth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from spark_flow.exceptions import (
    ConfigurationError,
    QueueNotFoundError,
    SchemaMismatchError,
    SubscriptionNotFoundError,
    UnknownKeyError,
)
from spark_flow.flow.conf_record import record_queue_conf
from spark_flow.flow.queue import Queue
from spark_flow.rules.depth import Depth
from spark_flow.spark.batch import message_size
from spark_flow.spark.declare import declare
from spark_flow.spark.session import with_conf
from spark_flow.spark.sink import QueueSink

SCHEMA = "id BIGINT, body STRING"


def messages(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), SCHEMA)


def numbered(spark: SparkSession, first: int, count: int, body: str = "m") -> DataFrame:
    """``count`` messages ``(first.., body)``: each is 8 + len(body) bytes."""
    return messages(spark, *[(i, body) for i in range(first, first + count)])


def enqueue(queue: Queue, batch: DataFrame, batch_id: int) -> int:
    """Enqueue ``batch`` with the sink called as a function; return the version it committed."""
    QueueSink(queue.path, app_id="t")(batch, batch_id)
    return queue.refresh()


# -- declare ---------------------------------------------------------------------------------


def test_declare_creates_a_queue_table(spark: SparkSession, tmp_path: Path) -> None:
    """A Delta table with CDF on, its settings as flow.* properties (Qpid names normalized),
    and a ``default`` subscription before the first message."""
    path = str(tmp_path / "orders")
    settings = {"qpid.max_count": 100, "qpid.flow_stop_count": 80, "flow.resumeCount": 60, "maxSize": "1k"}
    queue = declare(spark, path, SCHEMA, settings=settings)

    assert DeltaTable.is_deltatable(path)
    properties = queue.properties()
    assert properties["delta.enableChangeDataFeed"] == "true"
    limits = ("flow.maxCount", "flow.stopCount", "flow.resumeCount", "flow.maxSize")
    assert {key: properties.get(key) for key in limits} == {
        "flow.maxCount": "100", "flow.stopCount": "80", "flow.resumeCount": "60", "flow.maxSize": "1k"}
    assert not [k for k in properties if k.startswith("qpid.")]
    assert properties["flow.queueName"] == "orders"
    assert properties["flow.stateLocation"] == str(tmp_path / "orders" / "_flow")

    assert queue.name == "orders"
    assert [(s.name, s.position) for s in queue.subscriptions.list()] == [("default", -1)]
    assert queue.depths() == {"default": Depth(0, 0)}
    settings = queue.settings()
    assert (settings.thresholds.stop_count, settings.thresholds.resume_count, settings.max_count, settings.max_size) == (
        80, 60, 100, 1024)
    assert spark.read.format("delta").load(path).schema.simpleString() == "struct<id:bigint,body:string>"


def test_declare_again_updates_settings_and_keeps_positions(spark: SparkSession, tmp_path: Path) -> None:
    """Declaring an existing queue with other limits changes its properties, not its subscriptions."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 10, "resumeCount": 5, "maxSize": 4096})
    version = enqueue(queue, numbered(spark, 0, 3), 0)
    queue.acknowledge("default", version)

    again = declare(spark, path, SCHEMA, settings={"flow.stopCount": 20, "qpid.flow_resume_count": 15})
    properties = Queue(path).properties()
    assert (properties["flow.stopCount"], properties["flow.resumeCount"], properties["flow.maxSize"]) == (
        "20", "15", "4096")
    assert again.subscriptions.get("default").position == version
    assert again.settings().thresholds.stop_count == 20
    # A schema is only needed to create the queue.
    assert declare(spark, path).path == queue.path

    # New settings are checked with the ones the queue keeps: resume 25 is above the stop 20.
    with pytest.raises(ConfigurationError, match=r"resumeCount.*stopCount=20"):
        declare(spark, path, SCHEMA, settings={"resumeCount": 25})
    assert Queue(path).properties()["flow.resumeCount"] == "15"


def test_declare_again_never_changes_subscriptions(spark: SparkSession, tmp_path: Path) -> None:
    """A dropped ``default`` stays dropped (it would come back at -1, counting every message ever
    written and holding producers), and the others keep their positions and flow state."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA, settings={"stopCount": 10, "resumeCount": 5})
    version = enqueue(queue, numbered(spark, 0, 3), 0)
    queue.create_subscription("audit", "latest")
    queue.drop_subscription("default")
    before = queue.subscriptions.list()

    again = declare(spark, path, SCHEMA, settings={"stopCount": 20})
    assert again.subscriptions.list() == before
    assert [(s.name, s.position) for s in before] == [("audit", version)]
    assert again.depths() == {"audit": Depth(0, 0)}


def test_conf_settings_are_recorded_where_the_queue_has_none(spark: SparkSession, tmp_path: Path) -> None:
    """Declared with ``spark.flow.*`` conf, a queue records those values (never the built-in
    defaults) as table properties, and a handle without that conf judges it with them; a key
    given explicitly wins over the conf."""
    path = str(tmp_path / "events")
    conf = {"spark.flow.stopCount": "500", "spark.flow.resumeCount": "300", "spark.flow.queues.ev*.stopSize": "1k",
            "spark.flow.queues.events.stallTimeout": "5s"}
    with with_conf(spark, conf):
        declare(spark, path, SCHEMA, settings={"resumeCount": 200})
    properties = {k: v for k, v in Queue(path).properties().items() if k.startswith("flow.") and "Location" not in k}
    assert properties == {"flow.queueName": "events", "flow.stopCount": "500", "flow.resumeCount": "200",
                          "flow.stallTimeout": "5s"}
    settings = Queue(path).settings()
    assert (settings.thresholds.stop_count, settings.thresholds.resume_count, settings.stall_timeout) == (500, 200, 5.0)
    assert settings.origins["stopCount"] == "flow.stopCount"


def test_a_later_conf_records_only_what_is_missing_and_reports_the_rest_once(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second process's conf: a key the queue has none of is recorded; a key it records with
    another value is not applied, and one log line names both values and ``spark-flow set``."""
    path = str(tmp_path / "events")
    declare(spark, path, SCHEMA, settings={"stopCount": 500, "resumeCount": 300})
    conf = {"spark.flow.stopCount": "800", "spark.flow.stallTimeout": "1min", "spark.flow.resumeCount": "300"}
    with caplog.at_level("WARNING", logger="spark_flow.flow.queue"):
        settings = record_queue_conf(Queue(path), conf)
        record_queue_conf(Queue(path), conf)
    assert (settings.thresholds.stop_count, settings.thresholds.resume_count, settings.stall_timeout) == (500, 300, 60.0)
    assert Queue(path).properties()["flow.stallTimeout"] == "1min"
    lines = [r.getMessage() for r in caplog.records if r.name == "spark_flow.flow.queue"]
    assert len(lines) == 1, lines
    assert "spark.flow.stopCount=800 (Spark conf) is not applied" in lines[0]
    assert "stopCount is 500 (flow.stopCount)" in lines[0] and "spark-flow set events stopCount=800" in lines[0]


def test_a_conf_that_would_make_the_queue_invalid_is_refused_before_it_is_recorded(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "events")
    declare(spark, path, SCHEMA, settings={"stopCount": 500})
    with pytest.raises(ConfigurationError, match=r"spark.flow.resumeCount='600'.*<= flow.stopCount=500"):
        record_queue_conf(Queue(path), {"spark.flow.resumeCount": "600"})
    assert "flow.resumeCount" not in Queue(path).properties()


def test_two_recorders_at_once_record_one_value(spark: SparkSession, tmp_path: Path) -> None:
    """Two processes with different conf record at the same moment: the record is a
    compare-and-set on the table's metadata, so one value wins and both end up judging with it."""
    import threading

    path = str(tmp_path / "events")
    declare(spark, path, SCHEMA)
    barrier, results = threading.Barrier(2), {}

    def record(stop: str) -> None:
        queue = Queue(path)
        barrier.wait()
        results[stop] = record_queue_conf(queue, {"spark.flow.stopCount": stop}).thresholds.stop_count

    threads = [threading.Thread(target=record, args=(stop,)) for stop in ("50", "70")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorded = int(Queue(path).properties()["flow.stopCount"])
    assert recorded in (50, 70) and set(results.values()) == {recorded}


def test_declare_by_catalog_name(spark: SparkSession, tmp_path: Path) -> None:
    """``declare(spark, "events_q", schema)`` creates a catalog table that is a queue."""
    database = "spark_flow_test_queue"
    spark.sql(f"CREATE DATABASE {database} LOCATION '{tmp_path / 'warehouse'}'")
    current = spark.catalog.currentDatabase()
    spark.catalog.setCurrentDatabase(database)  # so the table lands in tmp_path, not the working tree
    try:
        queue = declare(spark, "events_q", SCHEMA, settings={"stopCount": 7, "resumeCount": 5})
        assert spark.catalog.tableExists("events_q")
        assert queue.name == "events_q"
        assert queue.path.startswith(str(tmp_path / "warehouse"))
        assert queue.settings().thresholds.stop_count == 7
        QueueSink("events_q", app_id="t")(numbered(spark, 0, 2), 0)  # the sink resolves the name too
        assert queue.depths() == {"default": Depth(2, 2 * 9)}
        assert spark.table("events_q").count() == 2

        declare(spark, "events_q", SCHEMA, settings={"stopCount": 9})
        assert Queue(queue.path).settings().thresholds.stop_count == 9
    finally:
        spark.sql("DROP TABLE IF EXISTS events_q")
        spark.catalog.setCurrentDatabase(current)
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


def test_declare_over_files_that_are_not_delta(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "parquet"
    spark.range(3).write.parquet(str(path))
    with pytest.raises(QueueNotFoundError, match="not a Delta table"):
        declare(spark, str(path), SCHEMA)
    assert not (path / "_delta_log").exists()


def test_declare_without_schema_for_a_new_queue(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "q"
    with pytest.raises(QueueNotFoundError, match="schema is needed"):
        declare(spark, str(path))
    assert not (path / "_delta_log").exists()


def test_declare_with_another_schema(spark: SparkSession, tmp_path: Path) -> None:
    """Another type, another name, fewer columns: refused, and the queue is unchanged."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    for schema, detail in [("id BIGINT, body BINARY", "body:binary"), ("id BIGINT, text STRING", "text:string"),
                           ("id BIGINT", "got <struct<id:bigint>>")]:
        with pytest.raises(SchemaMismatchError, match=detail):
            declare(spark, path, schema, settings={"stopCount": 5})
    assert "flow.stopCount" not in Queue(path).properties(), "a refused declare changes nothing"


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        pytest.param({"stopCount": "abc"}, ConfigurationError, "stopCount='abc'", id="not a count"),
        pytest.param({"resumeCount": 9, "stopCount": 5}, ConfigurationError, r"resumeCount.*stopCount=5",
                     id="resume above stop"),
        pytest.param({"qpid.flow_stop_size": "lots"}, ConfigurationError, r"qpid\.flow_stop_size|flow\.stopSize",
                     id="bad Qpid size"),
        pytest.param({"policy": "drop"}, ConfigurationError, "ring-strict", id="unknown policy"),
        pytest.param({"stopCuont": 5}, UnknownKeyError, "Did you mean 'stopCount'", id="misspelled key"),
    ],
)
def test_bad_settings_fail_before_any_table_exists(spark: SparkSession, tmp_path: Path, settings: dict[str, Any],
                                                   error: type[Exception], match: str) -> None:
    path = tmp_path / "q"
    with pytest.raises(error, match=match):
        declare(spark, str(path), SCHEMA, settings=settings)
    assert not (path / "_delta_log").exists()


def test_queue_handle_needs_a_declared_queue(spark: SparkSession, tmp_path: Path) -> None:
    """``Queue`` refuses a plain Delta table; declaring adopts it, its rows become messages."""
    with pytest.raises(QueueNotFoundError, match="no Delta table"):
        Queue(str(tmp_path / "nothing"))
    plain = str(tmp_path / "plain")
    messages(spark, (1, "a"), (2, "b")).write.format("delta").save(plain)
    with pytest.raises(QueueNotFoundError, match="not declared as a queue"):
        Queue(plain)

    queue = declare(spark, plain, SCHEMA, settings={"stopCount": 3})
    assert queue.properties()["delta.enableChangeDataFeed"] == "true"
    assert queue.depths()["default"].count == 2


# -- subscriptions ---------------------------------------------------------------------------


def test_subscriptions_create_list_drop(spark: SparkSession, tmp_path: Path) -> None:
    queue = declare(spark, str(tmp_path / "q"), SCHEMA)
    first = enqueue(queue, numbered(spark, 0, 2), 0)

    latest = queue.create_subscription("b", "latest")
    assert latest.position == first
    assert queue.create_subscription("c", 0).position == 0
    assert queue.create_subscription("b", "earliest").position == first, "creating an existing one is a no-op"
    assert [(s.name, s.position) for s in queue.subscriptions.list()] == [("b", first), ("c", 0), ("default", -1)]
    assert queue.depths() == {"b": Depth(0, 0), "c": Depth(2, 18), "default": Depth(2, 18)}

    queue.drop_subscription("c")
    assert [s.name for s in queue.subscriptions.list()] == ["b", "default"]
    assert set(queue.depths()) == {"b", "default"}

    # "earliest" is the oldest message the queue keeps, even when every subscription read it.
    queue.acknowledge("default", first)
    assert queue.create_subscription("late", "earliest").position == -1
    assert queue.depths() == {"b": Depth(0, 0), "default": Depth(0, 0), "late": Depth(2, 18)}


def test_subscription_errors(spark: SparkSession, tmp_path: Path) -> None:
    """Unknown subscriptions name themselves and the known ones; bad positions create nothing."""
    queue = declare(spark, str(tmp_path / "q"), SCHEMA)
    for action in (lambda: queue.depth("nope"), lambda: queue.acknowledge("nope", 0),
                   lambda: queue.drop_subscription("nope"), lambda: queue.subscriptions.get("nope")):
        with pytest.raises(SubscriptionNotFoundError, match=r"'nope' does not exist.*'default'"):
            action()
    for position in ("middle", -2, 1.5, True):
        with pytest.raises(ConfigurationError, match="startingPosition"):
            queue.create_subscription("b", position)  # type: ignore[arg-type]
    assert [s.name for s in queue.subscriptions.list()] == ["default"]


# -- depth -----------------------------------------------------------------------------------


def test_depth_counts_enqueued_messages_and_acks_reduce_it(spark: SparkSession, tmp_path: Path) -> None:
    """Exact count and content size per subscription; acknowledging moves it, never back."""
    queue = declare(spark, str(tmp_path / "q"), SCHEMA)
    v1 = enqueue(queue, numbered(spark, 0, 3, body="ab"), 0)  # 3 x (8 + 2)
    v2 = enqueue(queue, numbered(spark, 3, 2, body="abcd"), 1)  # 2 x (8 + 4)
    v3 = enqueue(queue, numbered(spark, 5, 1, body=""), 2)  # 1 x 8
    assert v1 < v2 < v3
    assert queue.depths() == {"default": Depth(6, 30 + 24 + 8)}
    assert enqueue(queue, numbered(spark, 5, 1, body=""), 2) == v3, "a replayed batch id is not written twice"
    assert queue.depths() == {"default": Depth(6, 30 + 24 + 8)}

    assert queue.acknowledge("default", v1)
    assert queue.depth("default") == Depth(3, 32)
    assert not queue.acknowledge("default", v1 - 1), "acks never move back"
    assert queue.depth("default") == Depth(3, 32)
    assert queue.acknowledge("default", v3)
    assert queue.depths() == {"default": Depth(0, 0)}


def test_a_handle_sees_acks_made_through_another(spark: SparkSession, tmp_path: Path) -> None:
    """A gate lists the subscriptions on every look, from a list kept per table version: an
    ack made by another process (here another handle) is seen at the next look."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    consumer, producer = Queue(path), Queue(path)
    version = enqueue(producer, numbered(spark, 0, 4), 0)
    assert producer.depths() == {"default": Depth(4, 4 * 9)}
    assert consumer.acknowledge("default", version)
    assert producer.depths() == {"default": Depth(0, 0)}
    assert [s.position for s in producer.subscriptions.list()] == [version]


def test_two_subscriptions_at_different_positions(spark: SparkSession, tmp_path: Path) -> None:
    queue = declare(spark, str(tmp_path / "q"), SCHEMA)
    v1 = enqueue(queue, numbered(spark, 0, 4), 0)
    queue.create_subscription("audit", "latest")
    v2 = enqueue(queue, numbered(spark, 4, 2), 1)
    assert queue.depths() == {"audit": Depth(2, 18), "default": Depth(6, 54)}

    queue.acknowledge("default", v2)
    assert queue.depths() == {"audit": Depth(2, 18), "default": Depth(0, 0)}
    queue.acknowledge("audit", v2)
    assert queue.depths() == {"audit": Depth(0, 0), "default": Depth(0, 0)}
    assert v1 < v2


def test_plain_delta_append_counts_in_the_depth(spark: SparkSession, tmp_path: Path) -> None:
    """A writer that does not use spark-flow is counted: its rows, and as size the commit's
    numOutputBytes."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA)
    enqueue(queue, numbered(spark, 0, 2), 0)
    numbered(spark, 2, 5).write.format("delta").mode("append").save(path)
    queue.refresh()
    [info] = DeltaTable(path).history(1)
    written = int(info["operationMetrics"]["numOutputBytes"])
    assert written > 0
    assert queue.depths() == {"default": Depth(2 + 5, 2 * 9 + written)}


def test_message_size_rule(spark: SparkSession, tmp_path: Path) -> None:
    """Strings count their UTF-8 bytes, longs 8, nulls 0; the sink records the batch's sum."""
    batch = messages(spark, (1, "a"), (2, "héllo"), (3, None), (None, "日本"), (5, ""))
    sizes = [row[0] for row in batch.select(message_size(batch.schema)).collect()]
    assert sizes == [8 + 1, 8 + 6, 8, 6, 8]

    queue = declare(spark, str(tmp_path / "q"), SCHEMA)
    enqueue(queue, batch, 0)
    assert queue.depths() == {"default": Depth(5, 45)}
    [info] = DeltaTable(queue.path).history(1)
    assert '"count": 5' in info["userMetadata"] and '"size": 45' in info["userMetadata"]


def test_sink_refuses_a_batch_of_another_schema(spark: SparkSession, tmp_path: Path) -> None:
    """Nothing is enqueued from a batch whose columns differ from the queue's."""
    queue = declare(spark, str(tmp_path / "q"), SCHEMA)
    before = queue.refresh()
    batch = spark.createDataFrame([(1, "a", 2)], "id BIGINT, body STRING, extra INT")
    with pytest.raises(SchemaMismatchError, match=r"unknown columns \['extra'\]"):
        QueueSink(queue.path, app_id="t")(batch, 0)
    assert queue.refresh() == before


def test_purge_deletes_only_what_every_subscription_acknowledged(spark: SparkSession, tmp_path: Path) -> None:
    """Retention: messages acknowledged by every subscription are deleted, the rest stay; the
    purge counts nothing in the depth and readers do not see it as new messages."""
    from spark_flow.spark.declare import purge_acknowledged
    from spark_flow.spark.source import read_queue

    path = str(tmp_path / "q")
    queue = declare(spark, path, "id BIGINT, body STRING")
    sink = QueueSink(path, app_id="t")
    for batch in range(4):
        sink(spark.range(batch * 10, batch * 10 + 10).selectExpr("id", "CAST(id AS STRING) AS body"), batch)
    versions = [c.version for c in queue.ledger.commits(-1, queue.refresh()) if c.count]
    queue.create_subscription("slow", versions[0])  # acknowledged the first batch only
    queue.acknowledge("default", versions[2])  # acknowledged three batches
    depths = queue.depths()

    assert purge_acknowledged(spark, path) == 10
    remaining = sorted(r["id"] for r in spark.read.format("delta").load(path).collect())
    assert remaining == list(range(10, 40))
    assert queue.depths() == depths
    assert purge_acknowledged(spark, path) == 0

    query = (read_queue(spark, path, subscription="slow").writeStream.format("memory").queryName("purged_slow")
             .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "c")).start())
    query.awaitTermination(120)
    assert sorted(r["id"] for r in spark.table("purged_slow").collect()) == list(range(10, 40))


def vacuum(spark: SparkSession, path: str) -> None:
    """``VACUUM ... LITE RETAIN 0 HOURS`` with Delta's retention check off: every file a commit
    removed is deleted from storage at once (LITE finds them in the Delta log; a FULL VACUUM
    lists the table's directory too, 20 s a run here, and removes the same files)."""
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(key, "false")
    try:
        spark.sql(f"VACUUM delta.`{path}` LITE RETAIN 0 HOURS")
    finally:
        spark.conf.unset(key)


def read_all(spark: SparkSession, path: str, subscription: str, checkpoint: Path) -> list[int]:
    """Every message ``subscription`` has not acknowledged, through the flowqueue source
    (availableNow, so it acknowledges them); the ids in the order read."""
    import uuid

    from spark_flow.spark.source import read_queue

    name = f"read_{uuid.uuid4().hex}"
    query = (read_queue(spark, path, subscription=subscription).writeStream.format("memory").queryName(name)
             .trigger(availableNow=True).option("checkpointLocation", str(checkpoint)).start())
    assert query.awaitTermination(120), "the availableNow query did not end"
    assert query.exception() is None, query.exception()
    return [r["id"] for r in spark.table(name).orderBy("_position", "id").collect()]


def test_purge_then_vacuum_leaves_every_unacknowledged_message_readable(spark: SparkSession,
                                                                         tmp_path: Path) -> None:
    """Two subscriptions, ``slow`` 30 messages behind ``default``; purge, then VACUUM with
    retention 0: each reads every message it has not acknowledged, none missing, none twice.
    A second purge and VACUUM after more messages work the same way."""
    from spark_flow.spark.declare import purge_acknowledged

    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA)
    sink = QueueSink(path, app_id="t")
    for batch in range(4):
        sink(spark.range(batch * 10, batch * 10 + 10).selectExpr("id", "CAST(id AS STRING) AS body"), batch)
    versions = [c.version for c in queue.ledger.commits(-1, queue.refresh()) if c.count]
    queue.create_subscription("slow", versions[0])
    queue.acknowledge("default", versions[2])

    assert purge_acknowledged(spark, path) == 10
    vacuum(spark, path)
    assert read_all(spark, path, "slow", tmp_path / "c-slow") == list(range(10, 40))
    assert read_all(spark, path, "default", tmp_path / "c-default") == list(range(30, 40))

    sink(spark.range(40, 50).selectExpr("id", "CAST(id AS STRING) AS body"), 4)
    assert purge_acknowledged(spark, path) == 30, "everything both read before the last batch"
    vacuum(spark, path)
    assert sorted(r["id"] for r in spark.read.format("delta").load(path).collect()) == list(range(40, 50))
    assert read_all(spark, path, "slow", tmp_path / "c-slow2") == list(range(40, 50))
    assert read_all(spark, path, "default", tmp_path / "c-default2") == list(range(40, 50))
    assert queue.depths() == {"default": Depth(0, 0), "slow": Depth(0, 0)}


def test_earliest_starts_at_the_oldest_message_the_queue_keeps(spark: SparkSession, tmp_path: Path) -> None:
    """A drained, unpurged queue: a new subscription at ``earliest`` gets every message (as
    Kafka's and Pulsar's earliest). After a purge it starts after the purged ones, and a
    position among the purged ones is refused."""
    from spark_flow.spark.declare import purge_acknowledged

    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA)
    for batch in range(3):
        enqueue(queue, numbered(spark, batch * 10, 10), batch)
    latest = queue.refresh()
    queue.acknowledge("default", latest)

    audit = queue.create_subscription("audit", "earliest")
    assert audit.position == -1
    assert queue.depths()["audit"] == Depth(30, 30 * 9)
    assert read_all(spark, path, "audit", tmp_path / "c-audit") == list(range(30))

    assert purge_acknowledged(spark, path) == 30
    enqueue(queue, numbered(spark, 30, 5), 3)
    assert queue.create_subscription("late", "earliest").position == latest
    assert queue.depths()["late"] == Depth(5, 5 * 9)
    with pytest.raises(ConfigurationError, match=rf"startingPosition=0 .*a queue version >= {latest}.*purged"):
        queue.create_subscription("older", 0)
    assert "older" not in [s.name for s in queue.subscriptions.list()]
