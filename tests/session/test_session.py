"""The session helper: Delta works end to end, and an existing session is used as it is."""

from __future__ import annotations

import sys
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from spark_flow.spark.session import DELTA_PACKAGE, get_spark, session_flow_conf, with_conf


def test_session_has_delta_and_the_running_interpreter(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert "io.delta.sql.DeltaSparkSessionExtension" in conf.get("spark.sql.extensions")
    assert conf.get("spark.sql.catalog.spark_catalog").endswith("DeltaCatalog")
    assert DELTA_PACKAGE in conf.get("spark.jars.packages")
    jars = spark.sparkContext._jsc.sc().listJars().mkString(" ")
    assert "delta-spark_4.2_2.13-4.4.0.jar" in jars and "delta-storage-4.4.0.jar" in jars
    assert "hadoop-client-runtime" not in jars, "Spark's own hadoop client is not fetched again"
    assert conf.get("spark.pyspark.python") == sys.executable
    assert "-Xss16m" in conf.get("spark.driver.extraJavaOptions")


def test_the_suite_s_sessions_plan_for_small_batches(spark: SparkSession) -> None:
    """The suite's JVMs read ``conftest.SMALL_BATCHES`` from ``JDK_JAVA_OPTIONS``: no whole-stage
    code generation, no adaptive execution."""
    assert (spark.conf.get("spark.sql.codegen.wholeStage"), spark.conf.get("spark.sql.adaptive.enabled")) == (
        "false", "false")
    assert "WholeStageCodegen" not in spark.range(3).groupBy().count()._jdf.queryExecution().executedPlan().toString()


def test_existing_session_is_returned_unchanged(spark: SparkSession) -> None:
    again = get_spark({"spark.sql.shuffle.partitions": "99", "spark.master": "local[1]"})
    assert again is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_conf_set_for_a_block_is_as_it_was_after_it(spark: SparkSession) -> None:
    """``with_conf``: a key set before the block has its value back, one not set before is unset
    again (a test that left the session's shuffle partitions at Spark's 200 made every later
    test's shuffle 200 tasks)."""
    with with_conf(spark, {"spark.sql.shuffle.partitions": "5", "spark.flow.stopCount": "3"}):
        assert (spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get("spark.flow.stopCount")) == ("5", "3")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.flow.stopCount", None) is None


def test_session_flow_conf_reads_exactly_the_spark_flow_keys_set_now(spark: SparkSession) -> None:
    """Only the ``spark.flow.*`` keys, as set now; values keep their commas and equal signs."""
    keys = {"spark.flow.stopCount": "7", "spark.flow.queues.events.>.resumeSize": "a=1, b=2",
            "spark.flowing": "not ours"}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        conf = session_flow_conf(spark)
        assert conf == {k: v for k, v in spark.conf.getAll.items() if k.startswith("spark.flow.")}
        assert conf["spark.flow.stopCount"] == "7"
        assert conf["spark.flow.queues.events.>.resumeSize"] == "a=1, b=2"
        assert "spark.flowing" not in conf
        spark.conf.set("spark.flow.stopCount", "8")
        assert session_flow_conf(spark)["spark.flow.stopCount"] == "8"
    finally:
        for key in keys:
            spark.conf.unset(key)
    assert not set(keys) & set(session_flow_conf(spark))


def test_delta_write_and_stream_read(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    df = spark.range(5).withColumnRenamed("id", "n")
    df.write.format("delta").save(path)
    query = (
        spark.readStream.format("delta").load(path)
        .writeStream.format("memory").queryName("session_probe").trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    )
    query.awaitTermination(120)
    assert_df_equality(spark.table("session_probe"), df, ignore_row_order=True, ignore_nullable=True)
