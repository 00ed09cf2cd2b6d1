"""Enqueue a stream into a spark-flow queue; the producer is held while the queue is flow-stopped.

The queue is declared if it does not exist (a Delta table with the message schema below, or
--schema). Thresholds come from Spark conf (spark.flow.stopCount, spark.flow.queues.<pattern>.*),
the queue's flow.* table properties, and this job's --capacity / --on-full. Each micro-batch
prints one progress line on stdout:

  12:00:07 producer=p1 queue=events batch=4 enqueued=100 depth=612 depthBytes=61200
           flowStopped=true flowStoppedCount=1 held=3.2s throttled=0.0s

(one line, printed when the batch completes, from the query's progress; depth is the deepest
subscription's, after the batch; held is how long the batch waited for the queue to resume,
throttled how long its writes waited for --msg-publish-rate / --byte-publish-rate).

Message schema of a queue this job declares (--source rate):
  id BIGINT, producer STRING, event_time TIMESTAMP, body STRING
with body padded so that each message is --message-size bytes as spark-flow counts them
(8 for id, 8 for event_time, the UTF-8 bytes of producer and body).

examples:
  # 200 messages/s into /data/queues/events; held when more than 500 wait for a consumer
  spark-submit --properties-file conf/spark-defaults.conf --conf spark.flow.stopCount=500 \\
      --conf spark.flow.resumeCount=300 jobs/producer.py --queue /data/queues/events --rate 200

  # the same without spark-submit (a local session with Delta), for 60 seconds
  python jobs/producer.py --queue /data/queues/events --rate 200 --run-seconds 60

  # 500 messages/s offered, written at most 100 messages and 64 KiB a second (Pulsar's publish rate)
  spark-submit --properties-file conf/spark-defaults.conf jobs/producer.py \\
      --queue /data/queues/events --rate 500 --msg-publish-rate 100 --byte-publish-rate 64k

  # new JSON files in a folder (read with the queue's schema)
  spark-submit --properties-file conf/spark-defaults.conf jobs/producer.py \\
      --queue /data/queues/events --source files --path /data/incoming --format json

  # a pipeline stage: read queue events, write queue enriched; events' consumer is held
  # back (no new messages admitted) while enriched is flow-stopped
  spark-submit --properties-file conf/spark-defaults.conf jobs/producer.py \\
      --queue /data/queues/enriched --source queue --from-queue /data/queues/events --name stage1
"""

from __future__ import annotations

import argparse
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from _common import (
    HelpFormatter,
    ProgressLines,
    add_run_options,
    emit,
    fmt_bool,
    main_guard,
    positive_int,
    positive_size,
    run_query,
    size,
    start_session,
    starting,
)

from spark_flow import (
    FlowProgress,
    QueueNotFoundError,
    QueueSink,
    declare,
    open_queue,
    read_queue,
)
from spark_flow.flow.conf_record import record_queue_conf
from spark_flow.rules.keys import ON_FULL, check_conf
from spark_flow.rules.names import queue_name
from spark_flow.rules.settings import producer_settings
from spark_flow.spark.batch import conform
from spark_flow.spark.declare import queue_location
from spark_flow.spark.session import session_flow_conf, session_storage_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

MESSAGE_SCHEMA = "id BIGINT, producer STRING, event_time TIMESTAMP, body STRING"
#: Bytes of a rate message besides producer and body: id and event_time, 8 each.
FIXED_BYTES = 16
#: Columns the flowqueue source adds to a queue's own.
SOURCE_COLUMNS = ("_position", "_enqueue_time")
DEFAULT_RATE = 100
DEFAULT_MESSAGE_SIZE = 100


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="producer.py", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--queue", required=True, metavar="QUEUE",
                        help="the destination queue: a path (anything with '/' or ':') or a catalog table name; "
                             "declared if it does not exist")
    parser.add_argument("--name", default="producer",
                        help="this producer's name: the producer column of rate messages, the query name, and "
                             "the default checkpoint (give each producer of a queue its own)")
    source = parser.add_argument_group("input")
    source.add_argument("--source", choices=("rate", "files", "queue"), default="rate",
                        help="rate: generated messages; files: new files in --path; queue: another queue's "
                             "messages (--from-queue), as a pipeline stage")
    source.add_argument("--rate", type=positive_int, metavar="N",
                        help=f"--source rate: messages per second (default {DEFAULT_RATE}); keep it across restarts "
                             "from one checkpoint: Spark's rate source numbers rows by seconds x rate, so another "
                             "rate repeats ids")
    source.add_argument("--message-size", type=size, metavar="BYTES",
                        help=f"--source rate: each message's size in bytes, units allowed: 200, 1k "
                             f"(default {DEFAULT_MESSAGE_SIZE})")
    source.add_argument("--path", metavar="DIR", help="--source files: the folder watched for new files")
    source.add_argument("--format", choices=("json", "csv", "parquet"), default="json",
                        help="--source files: the files' format (csv files have a header line)")
    source.add_argument("--max-files-per-trigger", type=positive_int, metavar="N",
                        help="--source files: at most N new files per micro-batch")
    source.add_argument("--from-queue", metavar="QUEUE", help="--source queue: the queue read (path or name)")
    source.add_argument("--subscription", default="default",
                        help="--source queue: the subscription of --from-queue this stage consumes "
                             "(created at the earliest message if it does not exist)")
    source.add_argument("--max-records-per-trigger", type=positive_int, metavar="N",
                        help="--source queue: admit about N messages per micro-batch (whole commits)")
    source.add_argument("--available-now", action="store_true",
                        help="--source files|queue: enqueue what the source holds when the job starts, then stop "
                             "(Spark's availableNow trigger, in batches as --max-files-per-trigger or "
                             "--max-records-per-trigger say; --trigger and --run-seconds do not apply)")
    source.add_argument("--schema", metavar="DDL",
                        help="--source files|queue: the message schema, used when the queue is declared "
                             f"(default: {MESSAGE_SCHEMA!r}; for --source queue, --from-queue's columns)")
    flow = parser.add_argument_group("flow control (this producer's; the queue's thresholds are the queue's)")
    flow.add_argument("--capacity", type=positive_int, metavar="N",
                      help="this producer's window: messages it may still enqueue after the queue went "
                           "flow-stopped (spark.flow.capacity, default 10000)")
    flow.add_argument("--on-full", choices=ON_FULL,
                      help="what this producer does while the queue is flow-stopped: hold (wait), reject (fail "
                           "at once), reject-after (fail after spark.flow.rejectTimeout) (spark.flow.onFull, "
                           "default hold)")
    flow.add_argument("--msg-publish-rate", type=positive_int, metavar="N",
                      help="this producer's publish rate: at most N messages a second are written, the writes "
                           "paced (spark.flow.msgPublishRate, default 0: no limit)")
    flow.add_argument("--byte-publish-rate", type=positive_size, metavar="BYTES",
                      help="this producer's publish rate in bytes a second, units allowed: 64k, 1m "
                           "(spark.flow.bytePublishRate, default 0: no limit)")
    add_run_options(parser, "producer-<name>")
    args = parser.parse_args(argv)
    _check_source_options(parser, args)
    return args


def _check_source_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options that belong to another --source are refused, so a typo does not go unnoticed."""
    belongs = {"rate": ("rate", "message_size"), "files": ("path", "max_files_per_trigger"),
               "queue": ("from_queue", "max_records_per_trigger")}
    for source, names in belongs.items():
        for name in names:
            if source != args.source and getattr(args, name) is not None:
                parser.error(f"--{name.replace('_', '-')} applies to --source {source}, not --source {args.source}")
    if args.source == "rate" and args.schema:
        parser.error(f"--schema applies to --source files|queue; --source rate makes messages of {MESSAGE_SCHEMA!r}")
    if args.source == "rate" and args.available_now:
        parser.error("--available-now applies to --source files|queue; a rate source never runs out")
    if args.source == "files" and not args.path:
        parser.error("--source files needs --path DIR")
    if args.source == "queue" and not args.from_queue:
        parser.error("--source queue needs --from-queue QUEUE")
    args.rate = args.rate or DEFAULT_RATE
    args.message_size = args.message_size if args.message_size is not None else DEFAULT_MESSAGE_SIZE
    overhead = FIXED_BYTES + len(args.name.encode())
    if args.message_size < overhead:
        parser.error(f"--message-size {args.message_size} is below this producer's smallest message: "
                     f"{overhead} bytes (id, event_time and the name {args.name!r})")


def progress_line(producer: str) -> Callable[[FlowProgress], str]:
    """The producer's line for one completed batch (from its query's progress)."""
    return lambda flow: (f"producer={producer} queue={flow.queue} batch={flow.batch_id} enqueued={flow.count} "
                         f"depth={flow.depth_count} depthBytes={flow.depth_size} "
                         f"flowStopped={fmt_bool(flow.flow_stopped)} flowStoppedCount={flow.flow_stopped_count} "
                         f"held={flow.held_seconds:.1f}s throttled={flow.throttled_seconds:.1f}s")


def rate_messages(spark: SparkSession, name: str, rate: int, message_size: int) -> DataFrame:
    """Generated messages of MESSAGE_SCHEMA, each ``message_size`` bytes as spark-flow counts them."""
    from pyspark.sql import functions as F

    body_bytes = message_size - FIXED_BYTES - len(name.encode())
    return (spark.readStream.format("rate").option("rowsPerSecond", rate).load()
            .select(F.col("value").alias("id"), F.lit(name).alias("producer"),
                    F.col("timestamp").alias("event_time"),
                    F.rpad(F.concat(F.lit("m"), F.col("value").cast("string")), body_bytes, ".").alias("body")))


def file_messages(spark: SparkSession, args: argparse.Namespace, schema: StructType) -> DataFrame:
    """New files in ``--path``, read with the queue's schema."""
    reader = spark.readStream.format(args.format).schema(schema)
    if args.format == "csv":
        reader = reader.option("header", "true")
    if args.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
    return reader.load(args.path)


def queue_messages(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """Another queue's messages, admitted only while the destination queue is not flow-stopped."""
    options: dict[str, Any] = {"startingPosition": "earliest", "downstream": args.queue}
    if args.max_records_per_trigger:
        options["maxRecordsPerTrigger"] = args.max_records_per_trigger
    return read_queue(spark, args.from_queue, args.subscription, **options).drop(*SOURCE_COLUMNS)


def declared_schema(spark: SparkSession, args: argparse.Namespace) -> str | StructType:
    """The schema a new queue gets: --schema, --from-queue's columns, or MESSAGE_SCHEMA."""
    from pyspark.sql.types import StructType

    if args.schema:
        return args.schema
    if args.source == "queue":
        upstream = open_queue(queue_location(spark, args.from_queue), session_storage_options(spark))
        schema = spark.read.format("delta").load(upstream.path).schema
        return StructType([f for f in schema.fields if f.name not in SOURCE_COLUMNS])
    return MESSAGE_SCHEMA


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    flags = (("capacity", args.capacity), ("onFull", args.on_full), ("msgPublishRate", args.msg_publish_rate),
             ("bytePublishRate", args.byte_publish_rate))
    options = {key: value for key, value in flags if value is not None}
    with starting():  # a Ctrl-C before the query starts (a cluster with no room for it) ends the job
        spark = start_session(f"spark-flow-producer-{args.name}", args.verbose,  # a bad spark.flow.* conf fails here
                              check=lambda conf: (check_conf(conf), producer_settings(queue_name(args.queue), options, conf)))
        conf = session_flow_conf(spark)

        try:
            queue = open_queue(queue_location(spark, args.queue), session_storage_options(spark))
            created = False
        except QueueNotFoundError:
            queue = declare(spark, args.queue, declared_schema(spark, args))
            created = True
        settings = record_queue_conf(queue, conf)  # the conf's queue settings, where the queue has none recorded
        producer = producer_settings(queue.name, options, conf)
        schema = spark.read.format("delta").load(queue.path).schema

        if args.source == "rate":
            messages = rate_messages(spark, args.name, args.rate, args.message_size)
        elif args.source == "files":
            messages = file_messages(spark, args, schema)
        else:
            messages = queue_messages(spark, args)
        conform(messages, schema, queue.name)  # a schema mismatch fails here, before the query starts

    checkpoint = args.checkpoint or posixpath.join(queue.state_location, "checkpoints", f"producer-{args.name}")
    name = f"producer_{args.name}"
    lines = ProgressLines(name, "producer", progress_line(args.name), [queue.path], queue.storage_options)
    spark.streams.addListener(lines)
    trigger = {"availableNow": True} if args.available_now else {"processingTime": args.trigger}
    query = (messages.writeStream.foreachBatch(QueueSink(args.queue, options=options, query_name=name)).queryName(name)
             .option("checkpointLocation", checkpoint).trigger(**trigger).start())
    t = settings.thresholds
    ages = f" stopAge={t.stop_age:g}s resumeAge={t.resume_age:g}s" if t.stop_age else ""
    limits = (f"stopCount={t.stop_count} resumeCount={t.resume_count} stopSize={t.stop_size} resumeSize={t.resume_size}"
              f"{ages}" if t.enabled else "no flow control (set spark.flow.stopCount, stopSize, stopAge or maxCount)")
    emit(f"producer={args.name} started: queue {queue.name} ({queue.path}{', declared' if created else ''}), "
         f"source {args.source}, {limits}, policy={settings.policy} capacity={producer.capacity} "
         f"onFull={producer.on_full} msgPublishRate={producer.msg_publish_rate} "
         f"bytePublishRate={producer.byte_publish_rate}, checkpoint {checkpoint}")
    seconds = run_query(query, None if args.available_now else args.run_seconds)
    lines.wait_for_last()
    cut_short = lines.cut_short()
    for flow in cut_short:
        emit(f"producer={args.name} queue={flow.queue} batch={flow.batch_id} enqueued=partial "
             f"depth={flow.depth_count} depthBytes={flow.depth_size} flowStopped={fmt_bool(flow.flow_stopped)} "
             f"flowStoppedCount={flow.flow_stopped_count} held=interrupted "
             f"throttled={flow.throttled_seconds:.1f}s")
    interrupted = ", 1 batch cut short by the stop (finished on restart)" if cut_short else ""
    emit(f"producer={args.name} stopped after {seconds:.0f}s: {lines.batches} batches completed "
         f"({lines.messages} messages){interrupted}")


if __name__ == "__main__":
    main_guard(main)
