"""Consume a spark-flow queue subscription into a Delta table, as slowly as you ask.

Reads the queue with the flowqueue source; each micro-batch is appended to --output exactly
once (Delta txnAppId = the query id, txnVersion = the batch id, so a batch replayed after a
restart from the same --checkpoint is skipped) and acknowledged once Spark has completed it.
--delay-per-message and --rows-per-second make the consumer slow on purpose (each batch sleeps
before it is written), to watch a faster producer be held and resumed. Each micro-batch prints
one progress line on stdout:

  12:00:09 consumer=default queue=events batch=7 consumed=50 depth=420 depthBytes=42000
           flowStopped=true flowStoppedCount=1 lag=6.3s

(one line; depth is what remains for the subscription after this batch; flowStopped is the
subscription's flow state as the producers' gates last recorded it; lag is how long ago the
newest message of the batch was enqueued).

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
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from _common import (
    HelpFormatter,
    SlowConsumer,
    add_run_options,
    emit,
    fmt_bool,
    main_guard,
    positive_float,
    positive_int,
    run_query,
    start_session,
)

from spark_flow import Queue, open_queue, read_queue
from spark_flow.config import check_conf
from spark_flow.queue import queue_location
from spark_flow.storage import session_storage_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="consumer.py", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--queue", required=True, metavar="QUEUE", help="the queue read: a path or a catalog table name")
    parser.add_argument("--subscription", default="default", help="the subscription read and acknowledged")
    parser.add_argument("--starting-position", choices=("earliest", "latest"), default="earliest",
                        help="where a subscription that does not exist yet is created (an existing one goes on "
                             "from its acknowledged position)")
    parser.add_argument("--max-records-per-trigger", type=positive_int, metavar="N",
                        help="admit about N messages per micro-batch (whole commits; default: all there are)")
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
    return parser.parse_args(argv)


class ProgressConsumer(SlowConsumer):
    """The slow consumer (``_common.SlowConsumer``) of one subscription, with a progress line
    per batch."""

    def __init__(self, queue: Queue, subscription: str, output: str, delay_per_message: float | None,
                 rows_per_second: float | None) -> None:
        # The slower of the two throttles: max(rows x delay, rows / rate) = rows x max(delay, 1 / rate).
        super().__init__(output, max(delay_per_message or 0.0, 1 / rows_per_second if rows_per_second else 0.0),
                         query_name=f"consumer_{subscription}")
        self.queue = queue
        self.subscription = subscription
        self._newest: int | None = None
        self._enqueued: datetime | None = None

    def read(self, batch: DataFrame) -> int:
        from pyspark.sql import functions as F

        rows, self._newest, self._enqueued = batch.agg(F.count(F.lit(1)), F.max("_position"),
                                                       F.max("_enqueue_time")).first()
        return rows

    def written(self, batch_id: int, rows: int) -> None:
        latest = self.queue.refresh()
        sub = self.queue.subscriptions.get(self.subscription)
        # Acknowledged once Spark completes the batch; what will remain then:
        depth = self.queue.ledger.depth(max(sub.position, self._newest if self._newest is not None else -1), latest)
        lag = (datetime.now() - self._enqueued).total_seconds() if self._enqueued is not None else 0.0
        emit(f"consumer={self.subscription} queue={self.queue.name} batch={batch_id} consumed={rows} "
             f"depth={depth.count} depthBytes={depth.size} flowStopped={fmt_bool(sub.flow_stopped)} "
             f"flowStoppedCount={sub.flow_stopped_count} lag={max(lag, 0.0):.1f}s")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start_session(f"spark-flow-consumer-{args.subscription}", args.verbose,  # a bad spark.flow.* conf fails here
                          check=check_conf)
    queue = open_queue(queue_location(spark, args.queue), session_storage_options(spark))
    queue.settings()  # the queue's recorded settings must hold

    options: dict[str, object] = {"startingPosition": args.starting_position}
    if args.max_records_per_trigger:
        options["maxRecordsPerTrigger"] = args.max_records_per_trigger
    messages = read_queue(spark, args.queue, args.subscription, **options)
    checkpoint = args.checkpoint or posixpath.join(queue.state_location, "checkpoints", f"consumer-{args.subscription}")
    consumer = ProgressConsumer(queue, args.subscription, args.output, args.delay_per_message, args.rows_per_second)
    query = (messages.writeStream.foreachBatch(consumer).queryName(str(consumer.query_name))
             .option("checkpointLocation", checkpoint).trigger(processingTime=args.trigger).start())
    depth = queue.depth(args.subscription)
    emit(f"consumer={args.subscription} started: queue {queue.name} ({queue.path}), depth {depth.count} messages / "
         f"{depth.size} bytes, output {args.output}, checkpoint {checkpoint}")

    def not_empty() -> bool:
        return args.until_empty and queue.depth(args.subscription).count > 0

    seconds = run_query(query, args.run_seconds or (0.0 if args.until_empty else None), keep_running=not_empty)
    depth = queue.depth(args.subscription)
    emit(f"consumer={args.subscription} stopped after {seconds:.0f}s: {consumer.batches} batches, "
         f"{consumer.consumed} messages consumed, depth {depth.count} messages / {depth.size} bytes")


if __name__ == "__main__":
    main_guard(main)
