"""Governed compute run through the engine (``spark.flow.io`` auto, nothing set): a producer's job
and a consumer's job, each a Spark Connect client of its own run to completion (``availableNow``,
serverless's only trigger), share a queue under flow control on storage only the server's JVM
holds keys for (the ``governed_connect`` fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from support.processes import ROOT
from support.servers import Governed

pytestmark = pytest.mark.processes

#: A producer job: a Delta table of ``rows`` messages in files of ten, enqueued by a QueueSink
#: through the engine, one file a batch, run to completion.
PRODUCER = """
import sys
from pyspark.sql import SparkSession
from spark_flow import QueueSink, declare
from spark_flow.spark.session import exit_process

url, queue, home, source, rows = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()
spark.conf.set("spark.flow.home", home)
declare(spark, queue, "id BIGINT", settings={"stopCount": 30, "resumeCount": 10})
for first in range(0, int(rows), 10):
    spark.range(first, first + 10, numPartitions=1).write.format("delta").mode("append").save(source)
messages = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
query = (messages.writeStream.foreachBatch(QueueSink(queue, options={"capacity": 10})).queryName("producer")
         .option("checkpointLocation", home + "/checkpoints/producer").trigger(availableNow=True).start())
query.awaitTermination()
print("producer done", flush=True)
exit_process(0)
"""

#: A consumer job, scheduled: once the queue's producer is held, a run to completion every few
#: seconds, until every message is enqueued and acknowledged; then what the engine's readers say.
CONSUMER = """
import json, sys, time
from pyspark.sql import SparkSession
from spark_flow import read_queue
from spark_flow.flow.queue import open_queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.session import exit_process, session_storage_options

url, queue, home, out, rows = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()
spark.conf.set("spark.flow.home", home)
storage = session_storage_options(spark)
deadline = time.monotonic() + 300
while True:  # the producer's job declares the queue, then is held
    try:
        if open_queue(queue, storage).subscriptions.get("default").flow_stopped:
            break
    except Exception:
        pass
    assert time.monotonic() < deadline, "the producer was never held"
    time.sleep(1)
held = open_queue(queue, storage)
runs = 0
while held.depths()["default"].count or spark.read.format("delta").load(queue).count() < int(rows):
    assert time.monotonic() < deadline, f"not drained: {held.depths()}"
    query = (read_queue(spark, queue).writeStream.format("delta").option("checkpointLocation", home + "/checkpoints/c")
             .trigger(availableNow=True).start(out))
    query.awaitTermination()
    runs += 1
    time.sleep(1)
admin = FlowAdmin(home, storage)
history = held.history.read()
delivered = spark.read.format("delta").load(out)
print(json.dumps({
    "runs": runs, "mode": type(held._table).__name__,
    "stops": [r["flow_stopped_count"] for r in history if r["flow_stopped"]],
    "deepest": max(r["depth_count"] for r in history),
    "delivered": delivered.count(), "distinct": delivered.select("id").distinct().count(),
    "subscriptions": [sub.name for sub in admin.subscriptions(held.name)], "why": admin.why(held.name),
    "conf": sorted(spark.conf.getAll.items()),
}, default=str), flush=True)
exit_process(0)
"""


def test_a_producer_and_a_consumer_on_engine_credentials_alone(governed_connect: Governed) -> None:
    """With nothing set: the producer's job is held at stop + capacity and resumed, the
    consumer's scheduled runs (Delta's source through the engine) take every message once, and
    its subscriptions and ``why`` read the queue through the engine. No Python process held a key: none in
    any environment, conf, output or log."""
    unique = uuid.uuid4().hex[:8]
    queue, home = f"s3a://flow/{unique}/events", f"s3a://flow/{unique}/home"
    env = {**os.environ, **governed_connect.env}
    url = governed_connect.url
    producer = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, f"{url}/;session_id={uuid.uuid4()}", queue, home, f"s3a://flow/{unique}/input",
         "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        consumer = subprocess.run(
            [sys.executable, "-c", CONSUMER, f"{url}/;session_id={uuid.uuid4()}", queue, home,
             f"s3a://flow/{unique}/out", "60"], capture_output=True, text=True, timeout=420, env=env, cwd=ROOT)
        produced = producer.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        producer.kill()
        produced = producer.communicate()
    finally:
        producer.kill()
    assert producer.returncode == 0 and "producer done" in produced[0], (
        f"producer:\n{produced[1][-4000:]}\nconsumer:\n{consumer.stdout[-3000:]}\n{consumer.stderr[-3000:]}")
    assert consumer.returncode == 0, consumer.stderr[-5000:]
    seen = json.loads(consumer.stdout.splitlines()[-1])
    print(json.dumps({key: value for key, value in seen.items() if key != "conf"}, indent=1))
    assert seen["mode"] == "EngineTable"
    assert seen["stops"] and seen["stops"] == list(range(1, len(seen["stops"]) + 1))
    assert 30 < seen["deepest"] <= 40, "held within stop + capacity"
    assert seen["delivered"] == seen["distinct"] == 60, "every message once"
    assert seen["subscriptions"] == ["default"]
    assert seen["why"] == ["events: does not hold its producers (depth 0 messages, 0 bytes; stop 30 / resume 10 "
                           "messages)"]
    for text in (*produced, consumer.stdout, consumer.stderr, json.dumps(seen["conf"]),
                 governed_connect.log.read_text(errors="replace")):
        assert governed_connect.secret not in text and governed_connect.key not in text
    for name, value in env.items():
        assert governed_connect.secret not in value and governed_connect.key not in value, name
