"""Producer overhead: the same stream written by a plain Delta streaming sink and by QueueSink
(thresholds never reached), side by side in one run. Prints and writes JSON with the ratio.

    .venv/bin/python bench/overhead.py [--rows 200000] [--commits 20] [--out bench/overhead.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from spark_flow import QueueSink, declare, get_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="bench/overhead.json")
    args = parser.parse_args()
    spark = get_spark({"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-"))
    source = str(base / "source")
    per_commit = args.rows // args.commits
    for i in range(args.commits):
        (spark.range(i * per_commit, (i + 1) * per_commit)
         .selectExpr("id", "concat('payload-', id) AS body").write.format("delta").mode("append").save(source))

    def run(start: Callable[[DataFrame], StreamingQuery]) -> float:
        stream = spark.readStream.format("delta").option("maxFilesPerTrigger", 4).load(source)
        began = time.perf_counter()
        start(stream).awaitTermination()
        return time.perf_counter() - began

    results: dict[str, list[float]] = {"plain_delta": [], "queue_sink": []}
    for round_ in range(args.rounds):
        plain, queue = str(base / f"plain{round_}"), str(base / f"queue{round_}")
        declare(spark, queue, "id BIGINT, body STRING", settings={"stopCount": 10 * args.rows})
        results["plain_delta"].append(run(lambda s, p=plain, r=round_: s.writeStream.format("delta")
                                          .option("checkpointLocation", str(base / f"cp_plain{r}"))
                                          .trigger(availableNow=True).start(p)))
        results["queue_sink"].append(run(lambda s, q=queue, r=round_: s.writeStream
                                         .foreachBatch(QueueSink(q, options={"capacity": args.rows}))
                                         .option("checkpointLocation", str(base / f"cp_queue{r}"))
                                         .trigger(availableNow=True).start()))
    best = {k: min(v) for k, v in results.items()}
    report = {
        "rows": args.rows, "source_commits": args.commits, "rounds": args.rounds, "seconds": results,
        "rows_per_second": {k: args.rows / v for k, v in best.items()},
        "queue_sink_over_plain_time_ratio": best["queue_sink"] / best["plain_delta"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
