"""The flow controller job: watches every queue registered under spark.flow.home, runs the flow
state machine per queue and subscription (applyInPandasWithState, checkpointed), applies operator
commands (spark-flow set / stop-producers / start-producers) in order, and keeps the status and
history tables that `spark-flow status` and `spark-flow plot` read.

Queues declared with spark.flow.home set are registered already; --queue registers others.
Each micro-batch prints one line on stdout:

  12:00:07 controller=spark_flow_controller batch=12 queues=2 subscriptions=3 flowStopped=events/default
           held=events stalled=- oldestAge=4.1s

(one line; held lists the queues whose producers wait: flow-stopped or stopped by an operator).

examples:
  spark-submit --properties-file conf/spark-defaults.conf --conf spark.flow.home=/data/flow \\
      jobs/controller.py

  # register two queues declared without a home, look every 500 ms, stop after a minute
  python jobs/controller.py --home /data/flow --queue /data/queues/a --queue /data/queues/b \\
      --trigger 500ms --run-seconds 60
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from _common import INTERRUPTED, HelpFormatter, emit, interval, main_guard, positive_float, start_session

from spark_flow import ConfigurationError, FlowAdmin, start_controller, stop_between_batches
from spark_flow.records.home import HOME_CONF
from spark_flow.rules.keys import check_conf
from spark_flow.spark.session import session_flow_conf, session_storage_options

if TYPE_CHECKING:
    import pandas as pd

CONTROLLER = "spark_flow_controller"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="controller.py", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--home", help=f"the control plane's location (default: the {HOME_CONF} conf)")
    parser.add_argument("--queue", action="append", default=[], metavar="QUEUE",
                        help="register this queue (path or catalog name) before starting; repeatable")
    parser.add_argument("--trigger", type=interval, default="1 second", metavar="INTERVAL",
                        help="how often the controller looks at every queue")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="the controller's checkpoint (default: <home>/_spark_flow/checkpoints/controller)")
    parser.add_argument("--forget-after", default="60s", metavar="DURATION",
                        help="a queue or subscription not seen for this long leaves the status table")
    parser.add_argument("--run-seconds", type=positive_float, metavar="N",
                        help="stop after N seconds (default: run until killed)")
    parser.add_argument("--available-now", action="store_true",
                        help="look at every queue once (applying pending commands) and exit: a controller run on a "
                             "schedule (Spark's Trigger.AvailableNow)")
    parser.add_argument("--verbose", "-v", action="store_true", help="also log transitions and commands (stderr)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    spark = start_session("spark-flow-controller", args.verbose, check_conf)
    home = args.home or session_flow_conf(spark).get(HOME_CONF)
    if not home:
        raise ConfigurationError(HOME_CONF, None, "the control plane's location: --home or --conf spark.flow.home")
    trigger: str | dict[str, bool] = {"availableNow": True} if args.available_now else args.trigger
    query = start_controller(spark, home, queues=args.queue, checkpoint_location=args.checkpoint,
                             trigger=trigger, forget_after=args.forget_after, query_name=CONTROLLER)
    admin = FlowAdmin(home, session_storage_options(spark))
    emit(f"controller started: home={admin.home} queues={len(admin.queues())} "
         f"trigger={'availableNow' if args.available_now else args.trigger}")
    started, printed = time.monotonic(), -1

    def report() -> None:
        nonlocal printed
        progress = query.lastProgress
        if progress and progress["batchId"] != printed and progress["numInputRows"]:
            printed = progress["batchId"]
            emit(_summary(printed, admin))

    try:
        while query.isActive and (args.run_seconds is None or time.monotonic() - started < args.run_seconds):
            if INTERRUPTED.is_set():
                emit("interrupted; stopping the controller")
                break
            query.awaitTermination(0.5)
            report()
        report()  # an availableNow run's look, when it ended between two waits
    finally:
        stop_between_batches(query)


def _summary(batch_id: int, admin: FlowAdmin) -> str:
    status = admin.status()
    stopped = status[status["flow_stopped"].fillna(False).astype(bool)]
    stalled = status[status["consumer_stalled"].fillna(False).astype(bool)]
    held = sorted(set(status[status["producers_held"].fillna(False).astype(bool)]["queue"]))
    ages = status["oldest_message_age_seconds"].dropna()
    return (f"controller={CONTROLLER} batch={batch_id} queues={status['queue'].nunique()} subscriptions={len(status)} "
            f"flowStopped={_names(stopped)} held={','.join(held) or '-'} stalled={_names(stalled)} "
            f"oldestAge={f'{ages.max():.1f}s' if len(ages) else '-'}")


def _names(rows: pd.DataFrame) -> str:
    return ",".join(f"{q}/{s}" for q, s in zip(rows["queue"], rows["subscription"], strict=True)) or "-"


if __name__ == "__main__":
    main_guard(main)
