"""The flowqueue streaming source: a subscription's messages in enqueue order, acknowledged
once Spark has completed them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_flow.flow.queue import Queue
from spark_flow.rules.depth import Position
from spark_flow.spark.declare import declare
from spark_flow.spark.offsets import offset_position

SCHEMA = "id BIGINT, body STRING"


@pytest.fixture
def queue(spark: SparkSession, tmp_path: Path) -> Queue:
    return declare(spark, str(tmp_path / "q"), SCHEMA)


def test_an_offset_without_index_is_the_whole_commit() -> None:
    """Checkpoints written before offsets had an index go on where they were: after the commit."""
    assert offset_position({"version": 7, "queue": "/q", "subscription": "default"}) == Position(7)
    assert offset_position({"version": 7, "index": 3, "queue": "/q", "subscription": "default"}) == Position(7, 3)
