"""What the producer and consumer jobs share: argument types, the session, run loops, errors.

Kept beside the jobs, not in the package: it is about running a job from a shell (exit codes,
one-line errors, progress lines on stdout), not about flow control.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from spark_flow import ConfigurationError, SparkFlowError, get_spark
from spark_flow.config import flow_conf, parse_size, session_flow_conf
from spark_flow.session import exit_process

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

#: Exit status of a job refused before it started (bad option or spark.flow.* conf), as argparse.
EXIT_USAGE = 2
#: Exit status of a job that failed while running (a query failed, a queue refused a batch).
EXIT_FAILED = 1


class JobError(Exception):
    """Thrown when a job cannot go on; main() prints its message as one line and exits."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description's examples kept as written, and an option's default shown when it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def positive_int(text: str) -> int:
    """An argparse type: a whole number > 0 (argparse names the option when it fails)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not > 0")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not > 0")
    return value


def size(text: str) -> int:
    """An argparse type: bytes, with spark-flow's units (``200``, ``1k``, ``2 MB``)."""
    try:
        return parse_size("size", text)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or with a unit: 512, 1k, 2MB)") from None


_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|millis|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)?\s*$", re.I)


def interval(text: str) -> str:
    """An argparse type: a processing-time trigger (``1 second``, ``500ms``, ``2`` = seconds),
    returned as Spark takes it."""
    match = _INTERVAL.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval (e.g. '1 second', '500ms', '2s')")
    unit = (match.group(2) or "s").lower()
    scale = 0.001 if unit == "ms" or unit.startswith("milli") else 60.0 if unit.startswith("m") else 1.0
    return f"{round(float(match.group(1)) * scale * 1000)} milliseconds"


def add_run_options(parser: argparse.ArgumentParser, checkpoint: str) -> None:
    """Options every job has: how often it triggers, where it keeps its checkpoint, how long it runs."""
    parser.add_argument("--trigger", type=interval, default="1 second", metavar="INTERVAL",
                        help="processing-time trigger: how often a micro-batch starts ('1 second', '500ms')")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="the query's checkpoint; keep it to restart where the job stopped, exactly once "
                             f"(default: <queue's state location>/checkpoints/{checkpoint}, e.g. <queue>/_flow/...)")
    parser.add_argument("--run-seconds", type=positive_float, metavar="N",
                        help="stop after N seconds (default: run until killed)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also log spark-flow's hold / resume decisions (stderr)")


def start_session(app_name: str, verbose: bool, check: Callable[[dict[str, str]], Any]) -> SparkSession:
    """The job's session: spark-submit's if there is one (its --conf kept), else a local one.

    ``check`` gets the ``spark.flow.*`` conf and raises on a bad value. Under spark-submit it
    runs before the SparkContext starts (the conf is already in spark-submit's JVM), so a bad
    value fails in seconds; otherwise it runs on the new session's conf.
    """
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # started by spark-submit: its JVM holds the conf
        from pyspark import SparkConf

        check(flow_conf(SparkConf().getAll()))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("spark_flow").setLevel(logging.INFO if verbose else logging.WARNING)
    # A query stopped while its batch is held reports the interrupted callback; that is expected.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    spark = get_spark({"spark.app.name": app_name})
    spark.sparkContext.setLogLevel("ERROR")
    check(session_flow_conf(spark))
    return spark


def now() -> str:
    """The wall-clock time that starts each progress line."""
    return datetime.now().strftime("%H:%M:%S")


def emit(line: str) -> None:
    """Print one progress line at once (stdout is a pipe under spark-submit, so flush)."""
    print(f"{now()} {line}", flush=True)


def fmt_bool(value: bool) -> str:
    return "true" if value else "false"


def query_active() -> Callable[[], bool]:
    """Whether the streaming query running the current foreachBatch call is still active.

    Looked up in the job's own session: the session a foreachBatch function is given is a clone
    whose ``streams`` does not list the query.
    """
    from pyspark.sql import SparkSession

    session = SparkSession.builder.getOrCreate()
    query_id = session.sparkContext.getLocalProperty("sql.streaming.queryId")

    def active() -> bool:
        query = session.streams.get(query_id) if query_id else None
        return query is not None and query.isActive

    return active


def sleep_while(active: Callable[[], bool], seconds: float) -> None:
    """Sleep ``seconds``, returning early once ``active()`` is False, so ``query.stop()`` is prompt."""
    deadline = time.monotonic() + seconds
    while active() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))


def run_query(query: StreamingQuery, run_seconds: float | None,
              keep_running: Callable[[], bool] = lambda: False,
              errors: Callable[[], BaseException | None] = lambda: None) -> float:
    """Wait for ``query`` for ``run_seconds`` (forever without), then as long as ``keep_running()``;
    stop it and return the seconds it ran.

    A query that ended on its own with an error raises :class:`JobError`, described by
    ``errors()`` (what the job's own foreachBatch caught) or by Spark. Errors of a batch cut short
    by the job's own stop (a held batch interrupted) are not failures: a restart finishes it.
    """
    started, stopped_here = time.monotonic(), False
    try:
        while query.isActive:
            if run_seconds is not None and time.monotonic() - started >= run_seconds and not keep_running():
                stopped_here = True
                break
            try:
                query.awaitTermination(0.5)
            except Exception:
                break  # it failed; reported below
    except KeyboardInterrupt:
        emit("interrupted; stopping the query")
        stopped_here = True
    finally:
        query.stop()
    failed = None if stopped_here else (errors() or query.exception())
    if failed is not None:
        raise JobError(f"query {query.name or query.id} failed: {describe(failed)}")
    return time.monotonic() - started


def describe(error: BaseException) -> str:
    """One line for an error: spark-flow's own message, or the first line Spark gave."""
    if isinstance(error, SparkFlowError):
        return f"{type(error).__name__}: {error}"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:  # a Python error inside a batch: Spark quotes its last line
        if "spark_flow.exceptions." in line or line.startswith(("spark_flow", "SparkFlowError")):
            return line
    return lines[0] if lines else type(error).__name__


def main_guard(main: Callable[[Sequence[str] | None], None], argv: Sequence[str] | None = None) -> NoReturn:
    """Run a job's main; errors become one line on stderr and a non-zero exit status.

    ``ConfigurationError`` (a bad ``spark.flow.*`` conf, found before any data moves) exits 2,
    as argparse does for a bad option; other failures exit 1.
    """
    try:
        main(argv)
    except ConfigurationError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        exit_process(EXIT_USAGE)
    except SparkFlowError as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        exit_process(EXIT_FAILED)
    except JobError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        exit_process(error.status)
    exit_process(0)
