"""Quickstart demo: local Spark with Delta, a table written and read back as a stream."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from spark_flow import get_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", help="where the demo's Delta tables go (default: a temporary directory)")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="spark-flow-demo-"))
    spark = get_spark()
    spark.sparkContext.setLogLevel("WARN")
    table = str(base / "events")
    spark.range(100).selectExpr("id", "concat('message-', id) AS body").write.format("delta").mode("overwrite").save(table)
    query = (
        spark.readStream.format("delta").load(table)
        .writeStream.format("memory").queryName("demo_events").trigger(availableNow=True)
        .option("checkpointLocation", str(base / "_checkpoints" / "demo")).start()
    )
    query.awaitTermination()
    print(f"read {spark.table('demo_events').count()} messages back from {table}")


if __name__ == "__main__":
    main()
