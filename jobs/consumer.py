"""Consume a spark-flow queue subscription into a Delta table, as slowly as you ask.

Reads the queue with the flowqueue source; each micro-batch is appended to --output exactly
once (Delta txnAppId = the query id, txnVersion = the batch id, so a batch replayed after a
restart from the same --checkpoint is skipped) and acknowledged once Spark has completed it.
--delay-per-message and --rows-per-second make the consumer slow on purpose (each batch sleeps
before it is written), to watch a faster producer be held and resumed. Each micro-batch prints
one progress line on stdout:

  12:00:09 consumer=default queue=events batch=7 consumed=50 depth=420 depthBytes=42000
           flowStopped=true flowStoppedCount=1 expired=0 deadLettered=0 redelivered=0 lag=6.3s

(one line, printed when the batch completes, from the query's progress; consumed counts each
message of the batch once; depth is what remains for the subscription after this batch;
flowStopped is the subscription's flow state as the producers' gates last recorded it; expired
and deadLettered count the subscription's messages expired and moved to the dead-letter queue
so far; redelivered, the deliveries after the first of a batch delivered again in parts to
find a message it fails on (the queue's maxDeliveries); lag is how long ago the newest message
of the batch was enqueued).

examples:
  # drain /data/queues/events into /data/out/events, 50 messages a second at most
  spark-submit --properties-file conf/spark-defaults.conf jobs/consumer.py \\
      --queue /data/queues/events --output /data/out/events --rows-per-second 50

  # a second, independent subscription that starts at the newest message
  python jobs/consumer.py --queue /data/queues/events --subscription audit \\
      --starting-position latest --output /data/out/audit

  # run at least 30 seconds, then until the subscription has nothing left
  spark-submit --properties-file conf/spark-defaults.conf jobs/consumer.py \\
      --queue /data/queues/events --output /data/out/events --run-seconds 30 --until-empty
"""

from __future__ import annotations

import argparse
import posixpath
import time
from collections.abc import Callable, Sequence

from _common import (
    HelpFormatter,
    ProgressLines,
    SlowConsumer,
    add_run_options,
    emit,
    fmt_bool,
    main_guard,
    positive_duration,
    positive_float,
    positive_int,
    positive_size,
    run_query,
    start_session,
    starting,
)

from spark_flow import DeadLetters, FlowProgress, Queue, open_queue, read_queue
from spark_flow.rules.keys import check_conf
from spark_flow.spark.declare import queue_location
from spark_flow.spark.session import session_storage_options


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="consumer.py", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--queue", required=True, metavar="QUEUE", help="the queue read: a path or a catalog table name")
    parser.add_argument("--subscription", default="default", help="the subscription read and acknowledged")
    parser.add_argument("--starting-position", choices=("earliest", "latest"), default="earliest",
                        help="where a subscription that does not exist yet is created (an existing one goes on "
                             "from its acknowledged position)")
    limits = parser.add_argument_group("read limits (the flowqueue source's options of the same names)")
    limits.add_argument("--max-records-per-trigger", type=positive_int, metavar="N",
                        help="admit N messages per micro-batch, the last one fewer (default: all there are)")
    limits.add_argument("--max-bytes-per-trigger", type=positive_size, metavar="SIZE",
                        help="admit whole messages up to SIZE bytes per micro-batch, at least one ('10m', '1g')")
    limits.add_argument("--min-records-per-trigger", type=positive_int, metavar="N",
                        help="wait for N messages before a micro-batch, at most --max-trigger-delay")
    limits.add_argument("--max-trigger-delay", type=positive_duration, metavar="DURATION",
                        help="how long a micro-batch may wait for --min-records-per-trigger ('30s', '5min'; "
                             "default 15min)")
    parser.add_argument("--output", required=True, metavar="PATH", help="the Delta table the messages are appended to")
    slow = parser.add_argument_group("throttling (a slow consumer, to watch flow control work)")
    slow.add_argument("--delay-per-message", type=positive_float, metavar="SECONDS",
                      help="each batch takes this long per message before it is written")
    slow.add_argument("--rows-per-second", type=positive_float, metavar="N",
                      help="each batch takes (its messages / N) seconds before it is written")
    parser.add_argument("--until-empty", action="store_true",
                        help="after --run-seconds (or at once without it), go on until the subscription's depth "
                             "is 0, then stop")
    add_run_options(parser, "consumer-<subscription>")
    args = parser.parse_args(argv)
    if args.max_trigger_delay is not None and args.min_records_per_trigger is None:
        parser.error("argument --max-trigger-delay: needs --min-records-per-trigger (how long a micro-batch may "
                     "wait for that many messages)")
    return args


def progress_line(queue: Queue) -> Callable[[FlowProgress], str]:
    """The consumer's line for one completed batch (from its query's progress); lag is how long
    ago the newest message it read was enqueued (its commit's time)."""
    def line(flow: FlowProgress) -> str:
        newest = queue.ledger.commits(flow.position - 1, flow.position)
        lag = time.time() - newest[0].timestamp / 1000 if newest else 0.0
        return (f"consumer={flow.subscription} queue={flow.queue} batch={flow.batch_id} consumed={flow.count} "
                f"depth={flow.depth_count} depthBytes={flow.depth_size} flowStopped={fmt_bool(flow.flow_stopped)} "
                f"flowStoppedCount={flow.flow_stopped_count} expired={flow.expired_count} "
                f"deadLettered={flow.dead_lettered_count} redelivered={flow.redelivered} lag={max(lag, 0.0):.1f}s")
    return line


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with starting():  # a Ctrl-C before the query starts (a cluster with no room for it) ends the job
        spark = start_session(f"spark-flow-consumer-{args.subscription}", args.verbose,  # a bad spark.flow.* conf fails here
                              check=check_conf)
        queue = open_queue(queue_location(spark, args.queue), session_storage_options(spark))
        queue.settings()  # the queue's recorded settings must hold

        options: dict[str, object] = {"startingPosition": args.starting_position}
        given = {"maxRecordsPerTrigger": args.max_records_per_trigger, "maxBytesPerTrigger": args.max_bytes_per_trigger,
                 "minRecordsPerTrigger": args.min_records_per_trigger,
                 "maxTriggerDelay": None if args.max_trigger_delay is None else f"{args.max_trigger_delay * 1000:g}ms"}
        options.update({key: value for key, value in given.items() if value is not None})
        messages = read_queue(spark, args.queue, args.subscription, **options)
    checkpoint = args.checkpoint or posixpath.join(queue.state_location, "checkpoints", f"consumer-{args.subscription}")
    name = f"consumer_{args.subscription}"
    # The slower of the two throttles: max(rows x delay, rows / rate) = rows x max(delay, 1 / rate).
    seconds_per_row = max(args.delay_per_message or 0.0, 1 / args.rows_per_second if args.rows_per_second else 0.0)
    lines = ProgressLines(name, "consumer", progress_line(queue), storage_options=queue.storage_options)
    spark.streams.addListener(lines)
    consumer = SlowConsumer(args.output, seconds_per_row, query_name=name)
    # With the queue's maxDeliveries, a message the consumer fails on alone goes to the dead-letter queue.
    process = DeadLetters(consumer, queue.path, args.subscription, query_name=name)
    query = (messages.writeStream.foreachBatch(process).queryName(name)
             .option("checkpointLocation", checkpoint).trigger(processingTime=args.trigger).start())
    depth = queue.depth(args.subscription)
    emit(f"consumer={args.subscription} started: queue {queue.name} ({queue.path}), depth {depth.count} messages / "
         f"{depth.size} bytes, output {args.output}, checkpoint {checkpoint}")

    def not_empty() -> bool:
        return args.until_empty and queue.depth(args.subscription).count > 0

    seconds = run_query(query, args.run_seconds or (0.0 if args.until_empty else None), keep_running=not_empty)
    lines.wait_for_last()
    depth = queue.depth(args.subscription)
    emit(f"consumer={args.subscription} stopped after {seconds:.0f}s: {lines.batches} batches, "
         f"{lines.messages} messages consumed, depth {depth.count} messages / {depth.size} bytes")


if __name__ == "__main__":
    main_guard(main)
