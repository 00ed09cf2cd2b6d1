"""Publish quotas: the rate a producer achieves under its msgPublishRate / bytePublishRate,
side by side with no quota in one run.

The same stream (a Delta source table of 100-byte messages, 1,000 a micro-batch) written by
``QueueSink`` for ``--seconds`` each with ``msgPublishRate`` 100, ``msgPublishRate`` 400,
``bytePublishRate`` 40k (409.6 messages a second) and no quota, each into its own declared
queue (no thresholds: nothing holds it). The rate is read from the queue's commits: the messages
after the first write over the time from the first commit to the last (the first write is the
burst of one second of quota the limiter allows; from there the quota is paid for). Each
variant's time throttled is the sum over its batches of the seconds their writes waited (from
the commits' metadata). Prints and writes JSON with the rates and their ratios to the quotas,
and a PNG of the messages written over time against the quotas (beside the JSON).

    .venv/bin/python bench/publish_rate.py [--seconds 30] [--out bench/publish_rate.json]
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from _report import figure, local_conf, machine, parser, write_report

from spark_flow import QueueSink, declare, get_spark
from spark_flow.rules.depth import METADATA_KEY

SCHEMA = "id BIGINT, body STRING"
MESSAGE_BYTES = 100  # 8 for id, 92 of body
BATCH = 1_000
#: (name, producer options, quota in messages a second)
VARIANTS: list[tuple[str, dict[str, str], float | None]] = [
    ("msgPublishRate=100", {"msgPublishRate": "100"}, 100.0),
    ("msgPublishRate=400", {"msgPublishRate": "400"}, 400.0),
    ("bytePublishRate=40k", {"bytePublishRate": "40k"}, 40 * 1024 / MESSAGE_BYTES),
    ("no quota", {}, None),
]


def main() -> None:
    options = parser(__doc__, "bench/publish_rate.json")
    options.add_argument("--seconds", type=float, default=30.0, help="how long each variant runs")
    args = options.parse_args()
    at_start = machine()
    spark = get_spark(local_conf(2))
    spark.sparkContext.setLogLevel("ERROR")
    base = Path(tempfile.mkdtemp(prefix="spark-flow-bench-"))
    source = str(base / "source")
    files = 300  # more than the fastest variant takes in a run
    (spark.range(files * BATCH).selectExpr("id", f"rpad(concat('m', id), {MESSAGE_BYTES - 8}, '.') AS body")
     .repartition(files).write.format("delta").save(source))

    results, samples = [], {}
    for name, producer, quota in VARIANTS:
        path = str(base / name.replace("=", "_").replace(" ", "_"))
        declare(spark, path, SCHEMA)
        query = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source).writeStream
                 .foreachBatch(QueueSink(path, options=producer)).option("checkpointLocation", f"{path}_checkpoint")
                 .start())
        query.awaitTermination(args.seconds)
        query.stop()  # a batch throttled at that moment ends there; its writes are in the queue
        commits = sink_commits(path)
        result, samples[name] = measure(name, quota, commits)
        results.append(result)
        print(json.dumps(result))

    report = {"benchmark": "publish_rate", "machine": at_start, "seconds_per_variant": args.seconds,
              "message_bytes": MESSAGE_BYTES, "messages_per_source_batch": BATCH, "variants": results}
    write_report(args.out, report, chart(results, samples))


def sink_commits(path: str) -> list[dict[str, Any]]:
    """The sink's commits to a queue, oldest first: time (ms), messages, bytes, batch and the
    seconds its batch had been throttled before it."""
    from deltalake import DeltaTable

    found = []
    for info in DeltaTable(path).history():
        metadata = json.loads(info.get("userMetadata") or "{}").get(METADATA_KEY)
        if metadata and metadata.get("batch") is not None:
            found.append({"version": info["version"], "time": info["timestamp"], "count": metadata["count"],
                          "size": metadata["size"], "batch": metadata["batch"], "throttled": metadata["throttled"]})
    return sorted(found, key=lambda c: c["version"])


def measure(name: str, quota: float | None, commits: list[dict[str, Any]]) -> tuple[dict[str, Any], list[list[float]]]:
    """A variant's rate (after its first write), its ratio to the quota, its time throttled;
    and its curve: (seconds since the first commit, messages written) at each commit."""
    first, last = commits[0], commits[-1]
    span = (last["time"] - first["time"]) / 1000
    messages = sum(c["count"] for c in commits)
    rate = (messages - first["count"]) / span
    throttled: dict[int, float] = {}
    for c in commits:
        throttled[c["batch"]] = max(throttled.get(c["batch"], 0.0), c["throttled"])
    writes_per_batch = len(commits) / len(throttled)
    curve, total = [], 0
    for c in commits:
        total += c["count"]
        curve.append([(c["time"] - first["time"]) / 1000, total])
    return {"variant": name, "quota_messages_per_second": quota, "messages": messages, "commits": len(commits),
            "batches": len(throttled), "writes_per_batch": round(writes_per_batch, 2),
            "seconds_first_to_last_commit": round(span, 2), "messages_per_second": round(rate, 1),
            "bytes_per_second": round(rate * MESSAGE_BYTES),
            "ratio_to_quota": round(rate / quota, 3) if quota else None,
            "seconds_throttled": round(sum(throttled.values()), 1)}, curve


def chart(results: list[dict[str, Any]], samples: dict[str, list[list[float]]]) -> Any:
    """Messages written over time per variant against its quota's line; and the rates."""
    fig, (over_time, rates) = figure(2, (12, 5))
    for result in results:
        name, quota = result["variant"], result["quota_messages_per_second"]
        curve = samples[name]
        line, = over_time.plot([t for t, _ in curve], [n for _, n in curve], drawstyle="steps-post", label=name)
        if quota:
            end = curve[-1][0]
            over_time.plot([0, end], [curve[0][1], curve[0][1] + quota * end], linestyle="--", color=line.get_color(),
                           linewidth=0.8)
    over_time.set_xlabel("seconds since the first commit")
    over_time.set_ylabel("messages written")
    over_time.set_title("messages written (dashed: the quota after the first write)")
    over_time.legend()
    limited = [r for r in results if r["quota_messages_per_second"]]
    bars = rates.bar([r["variant"] for r in limited], [r["ratio_to_quota"] for r in limited])
    rates.bar_label(bars, labels=[f"{r['messages_per_second']:g}/s" for r in limited])
    rates.axhline(1.0, color="gray", linewidth=0.8)
    free = next(r for r in results if not r["quota_messages_per_second"])
    rates.set_title(f"achieved rate / quota (no quota: {free['messages_per_second']:g} messages/s)")
    return fig


if __name__ == "__main__":
    main()
