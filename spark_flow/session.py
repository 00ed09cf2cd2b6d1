"""A SparkSession with Delta configured, created once or taken as it is.

Local runs and tests get a session with Delta's extension, catalog and jars (resolved from
Maven Central by Spark's package resolution); a session that already exists (Databricks, a
spark-submit job, a notebook) is used as it is, and settings given on spark-submit are kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Delta's jars for Spark 4.2 / Scala 2.13. delta-spark 4.4.1's Python package is pinned, but
#: its 4.4.1 jars are not on Maven Central; the 4.4.0 jars are, and they speak the same API.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"

DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Defaults for a session spark-flow creates; anything already set (spark-submit --conf,
#: spark-defaults.conf, the ``conf`` argument) wins.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "spark-flow",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    # Stopping a query that reads a Python data source overflowed the default thread stack.
    "spark.driver.extraJavaOptions": "-Xss16m",
    "spark.ui.showConsoleProgress": "false",
}


def get_spark(conf: Mapping[str, str] | None = None) -> SparkSession:
    """Return the active SparkSession, or create one with Delta configured.

    Parameters
    ----------
    conf : mapping, optional
        Settings for a session created here (``spark.master``, ``spark.flow.*``, ...). They do
        not override what spark-submit or spark-defaults.conf already set, and they are not
        applied to a session that exists already.

    Notes
    -----
    Python workers run the interpreter running this code (``PYSPARK_PYTHON``), unless one is
    named already: another interpreter may lack pyarrow.
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    spark_conf = SparkConf()
    for key, value in {**LOCAL_DEFAULTS, **DELTA_CONF, **(conf or {})}.items():
        spark_conf.setIfMissing(key, value)
    extensions = spark_conf.get("spark.sql.extensions")
    if DELTA_CONF["spark.sql.extensions"] not in extensions:
        spark_conf.set("spark.sql.extensions", f"{extensions},{DELTA_CONF['spark.sql.extensions']}")
    packages = spark_conf.get("spark.jars.packages", "")
    if "io.delta:delta-spark" not in packages and "delta-spark" not in spark_conf.get("spark.jars", ""):
        spark_conf.set("spark.jars.packages", ",".join(p for p in (packages, DELTA_PACKAGE) if p))
    # Python data source planning reads PYSPARK_PYTHON, not spark.pyspark.python: set both.
    python = spark_conf.get("spark.pyspark.python", None) or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", python)
    spark_conf.setIfMissing("spark.pyspark.python", python)
    return SparkSession.builder.config(conf=spark_conf).getOrCreate()
