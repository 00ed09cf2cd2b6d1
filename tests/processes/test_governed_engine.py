"""Governed compute run through the engine (``spark.flow.io`` auto, nothing set), with the queue
and its home as catalog names, managed tables in the catalog's storage, as a governed workspace
names them: a producer's job and a consumer's job, each a Spark Connect client of its own run to
completion (``availableNow``, serverless's only trigger), share the queue under flow control on
storage only the server's JVM holds keys for (the ``governed_connect`` fixture); then the
``spark-flow`` command line, with ``--remote``, works on it through the Connect session, the
controller's scheduled run (a Connect client too) writes the status it shows, and ``serve``'s
``/metrics`` say the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from support.homes import console_action, http
from support.processes import ROOT, SPARK_FLOW, spark_flow_serve
from support.servers import Governed
from support.streams import wait_until

pytestmark = pytest.mark.processes

#: A producer job: a table of ``rows`` messages in files of ten, enqueued by a QueueSink through
#: the engine, one file a batch, run to completion. Every table is named; only the checkpoint is a
#: path (a volume's, on Databricks).
PRODUCER = """
import sys
from pyspark.sql import SparkSession
from spark_flow import QueueSink, declare
from spark_flow.spark.session import exit_process

url, home, checkpoints, rows = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()
spark.sql(f"CREATE SCHEMA IF NOT EXISTS {home}")  # an administrator's, on a governed workspace
spark.conf.set("spark.flow.home", home)
declare(spark, f"{home}.events", "id BIGINT", settings={"stopCount": 30, "resumeCount": 10, "maxDeliveries": 1})
for first in range(0, int(rows), 10):
    spark.range(first, first + 10, numPartitions=1).write.format("delta").mode("append").saveAsTable(f"{home}.input")
messages = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).table(f"{home}.input")
query = (messages.writeStream.foreachBatch(QueueSink(f"{home}.events", options={"capacity": 10})).queryName("producer")
         .option("checkpointLocation", checkpoints + "/producer").trigger(availableNow=True).start())
query.awaitTermination()
print("producer done", flush=True)
exit_process(0)
"""

#: A consumer job, scheduled: once the queue's producer is held, a run to completion after
#: another, until every message is enqueued and acknowledged; then what the engine's readers say.
#: Message 13 is a poison: its processing fails (``assert_true``), and ``DeadLetters`` moves it,
#: in the server's foreachBatch worker, to the queue's dead-letter table through the engine.
CONSUMER = """
import json, sys, time
from pyspark.sql import SparkSession
from spark_flow import DeadLetters, read_queue
from spark_flow.flow.queue import open_queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.spark.session import exit_process, session_storage_options

url, home, checkpoints, rows = sys.argv[1:]
queue = f"{home}.events"
spark = SparkSession.builder.remote(url).getOrCreate()
spark.conf.set("spark.flow.home", home)
storage = session_storage_options(spark)
began = time.monotonic()
timeline = []  # when each step ended, in seconds from the start: a failure's message says where time went
deadline = began + 480  # held at 97 s alone; CI, loaded, once used up a shared 300 s
while True:  # the producer's job declares the queue, then is held
    try:
        if open_queue(queue, storage).subscriptions.get("default").flow_stopped:
            break
    except Exception:
        pass
    assert time.monotonic() < deadline, "the producer was never held in 480 s"
    time.sleep(1)
held = open_queue(queue, storage)
timeline.append(("held", round(time.monotonic() - began)))
deadline = time.monotonic() + 480  # its first run finds the poison message: 90 s alone
runs = 0
delivered_to = f"{home}.delivered"


def process(batch, batch_id):
    (batch.where("assert_true(id != 13, 'poison') IS NULL").write.format("delta").mode("append")
     .option("txnAppId", "consumer").option("txnVersion", batch_id).saveAsTable(delivered_to))


while spark.table(queue).count() < int(rows) or held.depths()["default"].count:  # all in, then read
    assert time.monotonic() < deadline, f"not drained: {held.depths()}; {timeline}"
    query = (read_queue(spark, queue).writeStream.foreachBatch(DeadLetters(process, queue))
             .option("checkpointLocation", checkpoints + "/consumer").trigger(availableNow=True).start())
    query.awaitTermination()
    runs += 1
    timeline.append((f"run {runs}", round(time.monotonic() - began)))
admin = FlowAdmin(home, storage)
history = held.history.read()
delivered = spark.table(f"{home}.delivered")
print(json.dumps({
    "runs": runs, "timeline": timeline, "mode": type(held._table).__name__,
    "stops": [r["flow_stopped_count"] for r in history if r["flow_stopped"]],
    "deepest": max(r["depth_count"] for r in history),
    "delivered": delivered.count(), "distinct": delivered.select("id").distinct().count(),
    "dead_letters": [(r.id, r._deliveries) for r in spark.table(queue + "_dlq").collect()],
    "dead_lettered": held.subscriptions.get("default").dead_lettered_count,
    "subscriptions": [sub.name for sub in admin.subscriptions(queue)], "why": admin.why(queue),
    "tables": sorted(t.name for t in spark.catalog.listTables(home)),
    "conf": sorted(spark.conf.getAll.items()),
}, default=str), flush=True)
exit_process(0)
"""


#: The controller's job, scheduled: one look at the home through the engine (``availableNow``), its
#: checkpoint a path (a volume's) as a schema home's must be.
CONTROLLER = """
import sys
from pyspark.sql import SparkSession
from spark_flow import start_controller
from spark_flow.spark.session import exit_process

url, home, checkpoints = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()
spark.conf.set("spark.flow.home", home)
query = start_controller(spark, checkpoint_location=checkpoints + "/controller", trigger={"availableNow": True})
query.awaitTermination()
print("controller done", flush=True)
exit_process(0)
"""


def test_a_producer_and_a_consumer_on_engine_credentials_alone(governed_connect: Governed) -> None:
    """With nothing set, the queue and home by catalog name: the producer's job is held at stop +
    capacity and resumed, the consumer's scheduled runs (Delta's source through the engine) take
    every message but a poison one once (that one dead-lettered by ``DeadLetters`` in the
    server's foreachBatch worker, into ``<queue>_dlq``), and its subscriptions and ``why``
    read the queue through the engine;
    queue, state and home are managed tables of the home's schema. Then ``spark-flow --remote``
    (``spark.flow.io=engine``, the default with a remote): ``why``, ``stop-producers`` (applied
    at once), ``status`` (what the controller last wrote: nothing, none ran; then, after the
    controller's scheduled run through the engine, the queue's row: drained, held by the
    operator, its flowStoppedCount the producer's stops), ``serve``'s ``/metrics`` (the same,
    read through the engine) and ``doctor`` (which says the engine, and passes). No Python
    process held a key: none in any environment, conf, output or log."""
    unique = uuid.uuid4().hex[:8]
    home, checkpoints = f"governed_{unique}", f"s3a://flow/{unique}/checkpoints"
    env = {**os.environ, **governed_connect.env}
    url = governed_connect.url
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, f"{url}/;session_id={uuid.uuid4()}", home, checkpoints,
                                 "40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        consumer = subprocess.run([sys.executable, "-c", CONSUMER, f"{url}/;session_id={uuid.uuid4()}", home,
                                   checkpoints, "40"], capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
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
    assert seen["delivered"] == seen["distinct"] == 39, "every message but the poison once"
    assert (seen["dead_letters"], seen["dead_lettered"]) == ([[13, 1]], 1), "the poison dead-lettered"
    assert seen["subscriptions"] == ["default"]
    queue = f"{home}.events"
    assert seen["why"] == [f"{queue}: does not hold its producers (depth 0 messages, 0 bytes; stop 30 / resume 10 "
                           "messages)"]
    assert set(seen["tables"]) - {f"{home}_events_holds"} == {  # the hold's time: recorded as the producer resumes
        "_spark_flow_queues", "delivered", "events", f"{home}_events_history", f"{home}_events_subscriptions", "input",
        f"{home}_events_starts",  # each run of the consumer: a batch at its start acknowledges (consumer_starts)
        "events_dlq", f"{home}_events_dlq_subscriptions"}  # a dead-letter queue has no flow control: no history
    outputs = _command_line(governed_connect, home, queue, checkpoints, len(seen["stops"]))
    for text in (*produced, consumer.stdout, consumer.stderr, json.dumps(seen["conf"]), *outputs,
                 governed_connect.log.read_text(errors="replace")):
        assert governed_connect.secret not in text and governed_connect.key not in text
    for name, value in env.items():
        assert governed_connect.secret not in value and governed_connect.key not in value, name


def _command_line(governed: Governed, home: str, queue: str, checkpoints: str, stops: int) -> list[str]:
    """The operator's commands on the pipeline's queue with ``--remote``, from an environment
    without a storage credential, around the controller's scheduled run; their outputs and the
    controller's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "SPARK_REMOTE"))}
    env.update(governed.env)  # instance metadata refused: nothing here reaches the bucket
    outputs: list[str] = []

    def cli(*args: str) -> str:
        started = time.monotonic()
        run = subprocess.run([str(SPARK_FLOW), "--remote", governed.url,
                              "--home", home, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        outputs.append(run.stdout + run.stderr)
        print(f"$ spark-flow {' '.join(args)}  ({time.monotonic() - started:.1f} s)\n{run.stdout}{run.stderr}")
        assert (run.returncode, run.stderr) == (0, ""), args
        return run.stdout

    assert cli("why", queue) == (f"{queue}: does not hold its producers (depth 0 messages, 0 bytes; stop 30 / "
                                 "resume 10 messages)\n")
    assert re.match(rf"command \d+: stop-producers '{queue}': applied to {queue}\b", cli("stop-producers", queue))
    assert cli("status").splitlines()[1:] == ["(none)"]  # no controller has run
    controller = subprocess.run([sys.executable, "-c", CONTROLLER, f"{governed.url}/;session_id={uuid.uuid4()}", home,
                                 checkpoints], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    outputs.append(controller.stdout + controller.stderr)
    assert controller.returncode == 0 and "controller done" in controller.stdout, controller.stderr[-5000:]
    header, *rows = cli("status").splitlines()
    shown_by_queue = {row.split()[0]: dict(zip(header.split(), row.split(), strict=True)) for row in rows}
    assert sorted(shown_by_queue) == [queue, f"{queue}_dlq"], rows  # the dead-letter queue is the home's too
    assert shown_by_queue[f"{queue}_dlq"]["depth"] == "1"  # its letter, for an operator to replay
    shown = shown_by_queue[queue]
    assert (shown["queue"], shown["subscription"], shown["depth"], shown["flowStopped"], shown["held"]) == (
        queue, "default", "0", "false", "true")  # drained, held by the operator's stop-producers
    assert shown["flowStoppedCount"] == str(stops)
    outputs.append(_scraped(governed, env, home, queue, stops))
    doctor = cli("doctor", queue).splitlines()
    assert "ok    store: engine (spark.flow.io=engine)" in doctor
    assert f"ok    queue {queue}: spark_catalog.{queue}: depth by subscription default 0" in doctor
    assert doctor[-1] == "8 of 8 checks passed", doctor
    return outputs


def _scraped(governed: Governed, env: dict[str, str], home: str, queue: str, stops: int) -> str:
    """``spark-flow --remote ... serve`` with no credential in its Python: its ``/metrics``, as
    Prometheus asks for them, say through the engine what ``status`` said; its console lists the
    queue held and its dead-letter queue with a letter, and an operator's start-producers from
    the page is applied through the engine (the queue no longer held); serve's output."""
    with spark_flow_serve("--remote", governed.url, "--home", home, env=env) as (serve, url):
        labels = f'home="{home}",queue="{queue}"'
        wanted = [f"spark_flow_producers_stopped{{{labels}}} 1.0",
                  f'spark_flow_depth_messages{{{labels},subscription="default"}} 0.0',
                  f'spark_flow_flow_stopped_total{{{labels},subscription="default"}} {float(stops)}']
        answers: list[tuple[int, str]] = []

        def says_it() -> bool:  # serve's first look at the home may take longer than a scrape waits
            answers.append(http(f"{url}metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"}))
            status, text = answers[-1]
            return status == 200 and all(line in text.splitlines() for line in wanted)

        try:
            wait_until(says_it, 120, interval=1.0)
        except AssertionError as error:
            raise AssertionError(f"{error}; the last answer: {answers[-1][0]}: {answers[-1][1][-3000:]}") from None
        listed = json.loads(http(f"{url}api/overview")[1])["queues"]
        assert sorted((q["name"], q["held"], q["depth"]["count"]) for q in listed) == [
            (queue, True, 0), (f"{queue}_dlq", False, 1)], listed
        status, text = console_action(url, "start-producers", queue)
        assert status == 200 and json.loads(text)["applied"] == [queue], text
        wait_until(lambda: not any(q["held"] for q in json.loads(http(f"{url}api/overview")[1])["queues"]), 60)
    return serve.stdout.read() + serve.stderr.read()  # type: ignore[union-attr]
