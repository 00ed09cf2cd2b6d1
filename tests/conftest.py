"""One local SparkSession with Delta for the whole suite (local[2], few partitions, no UI)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_flow.session import get_spark

TEST_CONF = {
    "spark.master": "local[2]",
    "spark.app.name": "spark-flow-tests",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.pyspark.python": sys.executable,
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_spark(TEST_CONF)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def no_query_outlives_its_module(spark: SparkSession) -> Iterator[None]:
    """Stop streaming queries a module left running: a forgotten query would go on taking one of
    the two cores from every test after it."""
    yield
    for query in spark.streams.active:
        print(f"\nstopping query {query.name or query.id}, left running by a test module")
        query.stop()
