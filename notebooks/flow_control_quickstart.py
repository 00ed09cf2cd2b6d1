# Databricks notebook source
# MAGIC %md
# MAGIC # spark-flow quickstart
# MAGIC Declare a Delta queue, run a producer faster than its consumer, watch flow control hold and
# MAGIC resume the producer in the status table, change a threshold at run time, hold it with a
# MAGIC limit on the whole home, stop the producer by hand, and plot the depth against the thresholds.
# MAGIC
# MAGIC Runs on Databricks (the cluster's session is used as it is: classic compute, or Spark Connect
# MAGIC on serverless and standard access mode) and locally:
# MAGIC `python notebooks/flow_control_quickstart.py` (tables under `$FLOW_NOTEBOOK_DIR` or a temp dir;
# MAGIC with `SPARK_REMOTE=sc://host:port` set, through a Spark Connect server).

# COMMAND ----------

import os
import tempfile
import time

from spark_flow import (
    FlowAdmin,
    FlowProgressListener,
    QueueSink,
    declare,
    get_spark,
    read_queue,
    start_controller,
    stop_between_batches,
)

spark = get_spark()
base = os.environ.get("FLOW_NOTEBOOK_DIR") or tempfile.mkdtemp(prefix="spark-flow-notebook-")
spark.conf.set("spark.flow.home", f"{base}/flow")  # queues declared from now on register here
queue_path = f"{base}/queues/orders"
queue = declare(spark, queue_path, "order_id BIGINT, customer STRING, amount DOUBLE",
                settings={"stopCount": 150, "resumeCount": 60})
admin = FlowAdmin(f"{base}/flow")
print(queue, queue.settings().thresholds)


def wait_for(what, predicate, timeout=180):
    """Poll until ``predicate()`` holds (a notebook cell that waits for the stream to get there)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:  # say what each query is doing, and what the status table has
            queries = {query.name: (query.status["message"], query.exception()) for query in spark.streams.active}
            raise TimeoutError(f"not within {timeout}s: {what}; queries: {queries}; status: {admin.status().to_dict('records')}")
        time.sleep(0.5)
    print("ok:", what)


def status(subscription="default"):
    rows = admin.status("orders")
    return rows[rows["subscription"] == subscription].to_dict("records")[0] if len(rows) else {}

# COMMAND ----------

# MAGIC %md The flow controller runs in this session (embedded mode; deployments run
# MAGIC `jobs/controller.py` as its own job). It keeps the status and history tables under `spark.flow.home`.

# COMMAND ----------

controller = start_controller(spark, trigger="1 second")

# COMMAND ----------

# MAGIC %md A producer of batches of 120 orders (one a second at most, written 60 at a time: its
# MAGIC capacity window), and a consumer that takes 60 orders every 2 seconds (30 a second, a
# MAGIC quarter of what the producer offers: on a busy cluster too): the queue fills, the producer is
# MAGIC held above 150 and goes on under 60. A query listener reports each batch's flow
# MAGIC control (in this notebook's process, also where the queries run on a Connect server).

# COMMAND ----------

listener = FlowProgressListener(home=f"{base}/flow")  # the producers of the home's queues, and every consumer
spark.streams.addListener(listener)
orders = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 120).load()
          .selectExpr("value AS order_id", "concat('customer-', value % 7) AS customer",
                      "CAST(value * 1.5 AS DOUBLE) AS amount"))
producer = (orders.writeStream.foreachBatch(QueueSink(queue_path, options={"capacity": 60}, query_name="orders_producer"))
            .option("checkpointLocation", f"{base}/checkpoints/producer").trigger(processingTime="1 second")
            .queryName("orders_producer").start())
consumer = (read_queue(spark, queue_path, maxRecordsPerTrigger=60).writeStream.format("delta")
            .option("checkpointLocation", f"{base}/checkpoints/consumer").trigger(processingTime="2 seconds")
            .queryName("orders_consumer").start(f"{base}/out/orders"))
wait_for("the producer is held (flowStopped)", lambda: status().get("flow_stopped") is True)
print(admin.status().T)  # on Databricks: display(admin.status())


def held_batches():
    reports = [flow for flows in list(listener.progress.values()) for flow in flows]
    return [flow for flow in reports if flow.role == "producer" and flow.held_seconds >= 1]


wait_for("the listener reports a held batch", lambda: bool(held_batches()))
print(held_batches()[0])

# COMMAND ----------

# MAGIC %md Change the thresholds at run time: the command is applied as it is issued, every
# MAGIC producer's gate obeys it from its next look, and the controller's status shows it.

# COMMAND ----------

admin.set("orders", stopCount=400, resumeCount=200)
wait_for("stop 400 in force", lambda: status().get("stop_count") == 400)
wait_for("the producer resumed under the new thresholds", lambda: status().get("flow_stopped") is False)

# COMMAND ----------

# MAGIC %md A limit on the whole home: the total depth of every queue registered under
# MAGIC `spark.flow.home` (as ActiveMQ's `systemUsage` beside each destination's limits). Over the
# MAGIC home's stop, every producer of every queue of the home is held, even one whose queue is
# MAGIC under its own stop; the home has its own status row (queue `>`, subscription `home`).

# COMMAND ----------


def home_status():
    rows = admin.status(">")
    rows = rows[rows["queue"] == ">"]
    return rows.to_dict("records")[0] if len(rows) else {}


admin.set_home(homeStopCount=100, homeResumeCount=50)
wait_for("the home holds the producer (its queue under its own stop)", lambda: home_status().get("flow_stopped") is True)
print(admin.status(">").T)
held_at = queue.refresh()
admin.unset_home("homeStopCount", "homeResumeCount")
wait_for("the producer goes on without the home's limit", lambda: queue.refresh() > held_at)

# COMMAND ----------

# MAGIC %md Stop the producer by hand (an operator's stop holds it whatever the depth), then start it again.

# COMMAND ----------

def enqueues_nothing_for(seconds):
    before = queue.refresh()
    time.sleep(seconds)
    return queue.refresh() == before


admin.stop_producers("orders")
wait_for("producers held by the operator", lambda: status().get("producers_stopped") is True)
wait_for("the stopped producer enqueues nothing", lambda: enqueues_nothing_for(3))
held_at = queue.refresh()
admin.start_producers("orders")
wait_for("producers going again", lambda: queue.refresh() > held_at)

# COMMAND ----------

# MAGIC %md Stop the producer, let the consumer drain the queue, and plot the run from the history table.

# COMMAND ----------

producer.stop()
wait_for("the queue drained", lambda: queue.depths()["default"].count == 0)
consumer.stop()
time.sleep(3)  # one more controller look at the empty queue
stop_between_batches(controller)  # not in mid-batch: that would log the state store's interruption
produced = spark.read.format("delta").load(queue_path)
delivered = spark.read.format("delta").load(f"{base}/out/orders")
final = status()
chart = admin.plot("orders", f"{base}/orders-depth.png")
print(f"produced {produced.count()}, delivered {delivered.count()} "
      f"({delivered.select('order_id').distinct().count()} distinct)")
print(f"flowStoppedCount {final['flow_stopped_count']}, plot {chart}")
listener.close()  # stop listening: under Spark Connect its thread would keep a script from ending (spark-flow closes it then)
