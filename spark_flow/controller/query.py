"""The flow controller: a streaming query that watches every queue of a home, runs the flow
state machine per queue and subscription, applies operator commands, and writes the status and
history tables.

    flowcontrol source (observations + commands)                    # spark_flow.controller.observation
      -> groupBy(queue, subscription).applyInPandasWithState(step)   # spark_flow.controller.step
      -> foreachBatch(ControllerSink)                                # spark_flow.controller.sink

The subscriptions table stays the one record of ``flowStopped`` / ``flowStoppedCount`` that
gates follow: the controller reads it in every observation, adopts what gates recorded, and
records its own transitions there with the same compare-and-set. So a restarted controller,
whose checkpointed state may be one batch behind, never counts a stop twice. Gates still turn
ON by themselves the moment they see ``depth > stop``, so the capacity bound holds when the
controller lags or is down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_flow.controller.engine_sink import EngineControllerSink
from spark_flow.controller.observation import FlowControlDataSource
from spark_flow.controller.sink import ControllerSink
from spark_flow.controller.step import GROUP, OUTPUT_SCHEMA, STATE_SCHEMA, FlowStep, step_input
from spark_flow.exceptions import ConfigurationError
from spark_flow.flow.queue import open_queue
from spark_flow.records.home import HOME_CONF, Registry, control_path
from spark_flow.rules.keys import check_conf, conf_settings
from spark_flow.rules.names import is_path, normalize_path
from spark_flow.rules.storage_options import as_conf
from spark_flow.rules.units import parse_duration
from spark_flow.spark.declare import queue_location
from spark_flow.spark.session import session_flow_conf, session_storage_options, with_conf
from spark_flow.store.access import check_access
from spark_flow.store.io import uses_engine

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("spark_flow.controller.query")

#: The partitions of the controller's state (a row per queue and subscription). Spark gives a
#: stateful query the session's ``spark.sql.shuffle.partitions`` when it first starts (a
#: cluster's default is 200), and each partition is a state store task and a Python worker in
#: every look. Two split the state's work of thousands of queues, and cost about what one does
#: for a few (bench/controller.py, 2 cores: 0.96 s a look at 1,000 queues, 1.18 with one
#: partition, 1.34 with eight; with eight, twice the CPU of two up to 100 queues). A checkpoint
#: keeps the number it was started with.
STATE_PARTITIONS = 2
#: The engine's controller is a foreachBatch of a ``rate`` stream: rows enough that every trigger
#: of a tenth of a second or more has some, so runs a batch (a look).
TICKS_PER_SECOND = 10


def start_controller(
    spark: SparkSession,
    home: str | None = None,
    *,
    queues: tuple[str, ...] | list[str] = (),
    checkpoint_location: str | None = None,
    trigger: str | Mapping[str, Any] = "1 second",
    forget_after: str = "60s",
    query_name: str = "spark_flow_controller",
) -> StreamingQuery:
    """Start the flow controller in this SparkSession (embedded mode, or the controller job's).

    Parameters
    ----------
    spark : SparkSession
    home : str, optional
        The control plane's location; default ``spark.flow.home``.
    queues : sequence of str, optional
        Queues (paths or catalog names) to register before starting; queues declared with
        ``spark.flow.home`` set are registered already.
    checkpoint_location : str, optional
        Default ``<home>/_spark_flow/checkpoints/controller``: a restart goes on from there. A
        schema home has no folder for it: give a path (a volume's). Where the engine reads the
        home (governed compute), the controller looks at the queues through this session
        (:mod:`spark_flow.controller.engine_sink`).
    trigger : str or mapping
        How often the controller looks at every queue (a processing-time interval), or
        ``DataStreamWriter.trigger`` keywords: ``{"availableNow": True}`` looks once and stops,
        for a controller run on a schedule (serverless compute has no processing-time triggers).
    forget_after : str
        A queue or subscription not seen for this long is removed from the status table.
    """
    from pyspark.sql.streaming.state import GroupStateTimeout

    home = home or spark.conf.get(HOME_CONF, None)
    if not home:
        raise ConfigurationError(HOME_CONF, home, "the control plane's location (a directory or object store path)")
    home = normalize_path(home)
    forget_ms = int(parse_duration("forget_after", forget_after, minimum=0.001) * 1000)
    conf = session_flow_conf(spark)
    check_conf(conf)
    ignored = sorted(key for key, _raw in conf_settings("", conf, "queue").values())
    if ignored:
        log.warning("the controller judges every queue with the settings recorded with it; its own Spark conf's "
                    "queue settings are not used: %s (spark-flow set changes a queue's)", ", ".join(ignored))
    storage = session_storage_options(spark)
    check_access(home, storage)  # before Spark writes the checkpoint: this Python reads the home too
    registry = Registry(home, storage)
    for queue in queues:
        handle = open_queue(queue_location(spark, queue), storage)
        registry.register(handle.name, handle.path)
    if not (checkpoint_location or is_path(home)):
        raise ConfigurationError("checkpoint_location", checkpoint_location,
                                 f"a path (a volume's, on Databricks): home {home} is a schema, with no folder for it")
    checkpoint = checkpoint_location or control_path(home, "checkpoints/controller")
    if uses_engine(home, storage):  # the queues are looked at here, through the session
        ticks = spark.readStream.format("rate").option("rowsPerSecond", TICKS_PER_SECOND).load()
        writer = ticks.writeStream.foreachBatch(EngineControllerSink(home, query_name, storage, forget_ms))
    else:
        check_state_layout(spark, checkpoint)
        spark.dataSource.register(FlowControlDataSource)
        observations = spark.readStream.format("flowcontrol").option("home", home).options(**as_conf(storage)).load()
        steps = step_input(observations).groupBy(GROUP).applyInPandasWithState(
            FlowStep(forget_ms), OUTPUT_SCHEMA, STATE_SCHEMA, "Update", GroupStateTimeout.ProcessingTimeTimeout)
        writer = steps.writeStream.outputMode("update").foreachBatch(ControllerSink(home, query_name, storage))
    writer = (writer.queryName(query_name).option("checkpointLocation", checkpoint)
              .trigger(**({"processingTime": trigger} if isinstance(trigger, str) else trigger)))
    with with_conf(spark, {"spark.sql.shuffle.partitions": str(STATE_PARTITIONS)}):  # Spark copies it at the start
        return writer.start()


def check_state_layout(spark: SparkSession, checkpoint: str) -> None:
    """Refuse a checkpoint whose state an earlier spark-flow's controller kept per queue and
    subscription (this one keeps it by group: :mod:`spark_flow.controller.step`), before Spark
    fails on it at the first batch and offers to skip its schema check. Read with Spark's
    ``statestore`` source: its schema only, no job."""
    from pyspark.errors import SparkRuntimeException

    try:
        key = spark.read.format("statestore").load(checkpoint).schema["key"].dataType
    except SparkRuntimeException as error:
        if error.getCondition() not in _NO_STATE:
            raise
        return
    if GROUP not in getattr(key, "names", [GROUP]):
        raise ConfigurationError(
            "checkpoint_location", checkpoint, "a checkpoint of this version's controller",
            "An earlier spark-flow's controller kept its state in another layout there: give a new checkpoint "
            "location (or remove this one). The flow state and flowStoppedCount are the subscriptions "
            "table's, so nothing is lost but the stall clocks and held-since times, which start again.")


#: What Spark's ``statestore`` source says of a checkpoint with no state to read: no batch
#: committed there yet, or a query's that kept none.
_NO_STATE = ("STDS_COMMITTED_BATCH_UNAVAILABLE", "STDS_FAILED_TO_READ_STATE_SCHEMA")


def stop_between_batches(query: StreamingQuery, timeout: float = 30.0) -> None:
    """Stop ``query`` when none of its micro-batches runs, or right after the one running ends
    (waiting at most ``timeout`` seconds). A stop in mid-batch interrupts the state store's
    tasks, which Spark logs as errors (harmless: the batch is redone at restart). Batches
    longer than the trigger interval follow each other with no pause between them: the stop
    then lands as the next one starts, mostly before its tasks run."""
    deadline = time.monotonic() + timeout
    running = _batch_id(query)
    while (query.isActive and query.status["isTriggerActive"] and _batch_id(query) == running
           and time.monotonic() < deadline):
        time.sleep(0.02)
    query.stop()


def _batch_id(query: StreamingQuery) -> int:
    """The last completed micro-batch's id (-1 before the first)."""
    progress = query.lastProgress
    return -1 if progress is None else int(progress["batchId"])
