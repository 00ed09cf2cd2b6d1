"""The session helper: Delta works end to end, and an existing session is used as it is."""

from __future__ import annotations

import sys
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from spark_flow.session import DELTA_PACKAGE, get_spark


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


def test_existing_session_is_returned_unchanged(spark: SparkSession) -> None:
    again = get_spark({"spark.sql.shuffle.partitions": "99", "spark.master": "local[1]"})
    assert again is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


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


def test_spark_defaults_conf_excludes_what_get_spark_excludes() -> None:
    from spark_flow.session import SPARK_PROVIDED

    conf = Path(__file__).parent.parent / "conf" / "spark-defaults.conf"
    lines = dict(line.split(None, 1) for line in conf.read_text().splitlines() if line.startswith("spark."))
    assert lines["spark.jars.packages"].strip() == DELTA_PACKAGE
    assert lines["spark.jars.excludes"].strip().split(",") == list(SPARK_PROVIDED)
