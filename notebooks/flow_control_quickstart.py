# Databricks notebook source
# MAGIC %md
# MAGIC # spark-flow quickstart
# MAGIC Declare a Delta queue, enqueue with flow control, read it with the `flowqueue` source,
# MAGIC look at depth and flow state, change a threshold at run time.
# MAGIC Runs on Databricks (the cluster's session is used as it is) and locally:
# MAGIC `python notebooks/flow_control_quickstart.py` (tables under `$FLOW_NOTEBOOK_DIR` or a temp dir).

# COMMAND ----------

import os
import tempfile

from spark_flow import QueueSink, declare, get_spark, read_queue

spark = get_spark()
base = os.environ.get("FLOW_NOTEBOOK_DIR") or tempfile.mkdtemp(prefix="spark-flow-notebook-")
queue_path = f"{base}/queues/orders"
queue = declare(spark, queue_path, "order_id BIGINT, customer STRING, amount DOUBLE",
                settings={"maxCount": 1000, "stopCount": 900, "resumeCount": 500})
print(queue, queue.config().thresholds)

# COMMAND ----------

# MAGIC %md Enqueue two batches. `QueueSink` is a foreachBatch function; called directly with an
# MAGIC `app_id`, each batch id is written exactly once (a repeated call writes nothing).

# COMMAND ----------

sink = QueueSink(queue_path, app_id="notebook-producer")
orders = spark.range(600).selectExpr("id AS order_id", "concat('customer-', id % 7) AS customer",
                                     "CAST(id * 1.5 AS DOUBLE) AS amount")
sink(orders.filter("order_id < 300"), 0)
sink(orders.filter("order_id >= 300"), 1)
sink(orders.filter("order_id >= 300"), 1)  # a replay: skipped
print(queue.depths())

# COMMAND ----------

# MAGIC %md Change the resume threshold at run time: it applies from the next look.

# COMMAND ----------

spark.sql(f"ALTER TABLE delta.`{queue_path}` SET TBLPROPERTIES ('flow.resumeCount' = '400')")
print(queue.config().thresholds)

# COMMAND ----------

# MAGIC %md Consume everything available with the `flowqueue` source; the subscription's
# MAGIC position moves as Spark completes batches.

# COMMAND ----------

consumer = (read_queue(spark, queue_path, maxRecordsPerTrigger=250)
            .writeStream.format("delta").trigger(availableNow=True)
            .option("checkpointLocation", f"{base}/checkpoints/consumer")
            .start(f"{base}/out/orders"))
consumer.awaitTermination()
delivered = spark.read.format("delta").load(f"{base}/out/orders")
print("delivered", delivered.count(), "messages; depth now", queue.depths())
display_rows = delivered.groupBy("customer").count().orderBy("customer").collect()
print(display_rows)

# COMMAND ----------

for subscription in queue.subscriptions.list():
    print(subscription.name, "position", subscription.position, "flowStopped", subscription.flow_stopped,
          "flowStoppedCount", subscription.flow_stopped_count)
