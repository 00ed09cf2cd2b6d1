"""Queue appends as one Spark write of Parquet files and one deltalake commit, and the tables
that keep Delta's writer because they need it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from spark_flow.rules.depth import METADATA_KEY, Position
from spark_flow.spark.batch import TXN_SPAN
from spark_flow.spark.declare import declare, purge_acknowledged
from spark_flow.spark.sink import QueueSink
from spark_flow.store.appends import DirectAppender, direct_append_refusal

SCHEMA = "id BIGINT, body STRING"


def messages(spark: SparkSession, first: int, count: int) -> DataFrame:
    return spark.createDataFrame([(i, f"m{i}") for i in range(first, first + count)], SCHEMA)


def newest_commit(path: str) -> dict:
    return DeltaTable(path).history(1)[0]


def test_a_plain_queue_is_appended_as_parquet_files_and_one_deltalake_commit(spark: SparkSession,
                                                                             tmp_path: Path) -> None:
    """Delta's writer costs most of a small batch outside its write job; a queue table that needs
    nothing of it gets the batch's Parquet files from Spark and one commit from deltalake, with
    the producer's transaction and metadata. Spark reads the messages, its change feed lists
    them as inserts, and no ``_SUCCESS`` marker is left (VACUUM would never remove one)."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA, settings={"stopCount": 100})
    sink = QueueSink(path, app_id="producer-1", options={"capacity": 50})
    sink(messages(spark, 0, 30), 0)

    commit = newest_commit(path)
    assert commit["engineInfo"].startswith("delta-rs"), commit
    metadata = json.loads(commit["userMetadata"])[METADATA_KEY]
    assert (metadata["count"], metadata["size"], metadata["batch"]) == (30, 30 * 8 + sum(len(f"m{i}") for i in range(30)), 0)
    assert DeltaTable(path).transaction_version("producer-1") == 0 * TXN_SPAN + 30
    assert_df_equality(spark.read.format("delta").load(path), messages(spark, 0, 30),
                       ignore_row_order=True, ignore_nullable=True)
    changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(path)
               .where("_change_type = 'insert'").select("id", "body"))
    assert_df_equality(changes, messages(spark, 0, 30), ignore_row_order=True, ignore_nullable=True)
    written = [name for _dir, _subdirs, names in os.walk(path) for name in names]
    assert "_SUCCESS" not in written


def test_a_write_committed_before_is_not_committed_again(spark: SparkSession, tmp_path: Path) -> None:
    """The commit carries ``txnAppId``/``txnVersion``: a write whose transaction is in the table
    (a replay after a crash between the commit and the batch's end) commits nothing."""
    path = str(tmp_path / "q")
    declare(spark, path, SCHEMA)
    appender = DirectAppender(path)
    assert appender.append(messages(spark, 0, 5), "app", 7, "{}")
    version = DeltaTable(path).version()
    assert appender.append(messages(spark, 0, 5), "app", 7, "{}")
    assert appender.append(messages(spark, 0, 5), "app", 6, "{}")
    assert DeltaTable(path).version() == version
    assert spark.read.format("delta").load(path).count() == 5


NEEDS_DELTAS_WRITER = {
    "NOT NULL column 'id'": "CREATE TABLE delta.`{path}` (id BIGINT NOT NULL, body STRING) USING delta",
    "writer features ['checkConstraints']": (
        "CREATE TABLE delta.`{path}` (id BIGINT, body STRING) USING delta; "
        "ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (id >= 0)"),
    "partition columns ['body']": "CREATE TABLE delta.`{path}` (id BIGINT, body STRING) USING delta PARTITIONED BY (body)",
    "writer features ['columnMapping']": ("CREATE TABLE delta.`{path}` (id BIGINT, body STRING) USING delta "
                       "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"),
    "writer features ['deletionVectors']": ("CREATE TABLE delta.`{path}` (id BIGINT, body STRING) USING delta "
                                            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"),
}


@pytest.mark.parametrize("reason", list(NEEDS_DELTAS_WRITER))
def test_a_table_that_needs_deltas_writer_keeps_it(spark: SparkSession, tmp_path: Path, reason: str) -> None:
    """Constraints, column mapping, partitions and writer features deltalake does not write are
    Delta's writer's to keep: a queue on such a table is appended to by it, as before."""
    path = str(tmp_path / "q")
    for statement in NEEDS_DELTAS_WRITER[reason].format(path=path).split("; "):
        spark.sql(statement)
    declare(spark, path, SCHEMA)
    assert direct_append_refusal(DeltaTable(path)) == reason
    QueueSink(path, app_id="producer-1")(messages(spark, 0, 3), 0)
    assert newest_commit(path)["engineInfo"].startswith("Apache-Spark"), reason
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2]


def test_delta_enforces_not_null_and_nothing_is_enqueued(spark: SparkSession, tmp_path: Path) -> None:
    """A NOT NULL column is checked by Delta's writer, so a batch with a null there fails and
    the queue holds none of it."""
    path = str(tmp_path / "q")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT NOT NULL, body STRING) USING delta")
    declare(spark, path, SCHEMA)
    version = DeltaTable(path).version()
    batch = spark.createDataFrame([(1, "a"), (None, "b")], SCHEMA)
    with pytest.raises(Exception, match="DELTA_NOT_NULL_CONSTRAINT_VIOLATED"):
        QueueSink(path, app_id="producer-1")(batch, 0)
    assert DeltaTable(path).version() == version


PLAIN_TYPES = ("id BIGINT, tags MAP<STRING, STRING>, items ARRAY<STRUCT<a: INT, b: STRING>>, bin BINARY, "
               "amount DECIMAL(38, 0), ts TIMESTAMP, ntz TIMESTAMP_NTZ, day DATE, ok BOOLEAN, x DOUBLE, note STRING")


def test_every_column_type_reads_back_from_spark_and_from_the_queue(spark: SparkSession, tmp_path: Path) -> None:
    """Maps, arrays of structs, binary, decimal(38), both timestamps, dates and a null-only
    column go through a direct append and read back the same in Spark and through the queue's
    change feed (``deltalake``, the ``flowqueue`` source's reader)."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, PLAIN_TYPES)
    batch = spark.sql("""
        SELECT id, map('k', concat('t', id % 3)) AS tags, array(named_struct('a', CAST(id AS INT), 'b', 'x')) AS items,
               CAST(concat('b', id) AS BINARY) AS bin, CAST(id AS DECIMAL(38, 0)) * 1000000000000000000000 AS amount,
               TIMESTAMP '2026-11-22 12:00:00.123456 UTC' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
               CAST('2026-11-22 12:00:00.123456' AS TIMESTAMP_NTZ) AS ntz, DATE '2026-11-22' AS day,
               id % 2 = 0 AS ok, id / 3 AS x, NULL AS note
        FROM range(7)""")
    QueueSink(path, app_id="p")(batch, 0)
    assert newest_commit(path)["engineInfo"].startswith("delta-rs")
    columns = ["id", "to_json(tags)", "to_json(items)", "hex(bin)", "CAST(amount AS STRING)",
               "CAST(unix_micros(ts) AS STRING)", "CAST(ntz AS STRING)", "CAST(day AS STRING)", "ok", "x", "note"]
    expected = sorted(batch.selectExpr(*columns).collect())
    assert sorted(spark.read.format("delta").load(path).selectExpr(*columns).collect()) == expected
    read = spark.createDataFrame(queue.read(Position(queue.refresh() - 1), Position(queue.refresh()))
                                 .drop_columns(["_position", "_enqueue_time"]))
    assert sorted(read.selectExpr(*columns).collect()) == expected


def test_an_append_records_each_files_messages_so_purge_counts_them(spark: SparkSession, tmp_path: Path) -> None:
    """Each file of an append carries its ``numRecords``: Delta counts the table from them, and a
    purge of what every subscription acknowledged says how many messages it removed."""
    path = str(tmp_path / "q")
    queue = declare(spark, path, SCHEMA)
    sink = QueueSink(path, app_id="p")
    sink(messages(spark, 0, 30).repartition(3), 0)
    sink(messages(spark, 30, 12), 1)
    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    assert sum(adds["num_records"]) == 42 and len(adds["num_records"]) >= 2
    queue.acknowledge("default", queue.refresh())
    assert purge_acknowledged(spark, path) == 42
