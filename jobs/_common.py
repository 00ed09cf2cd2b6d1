"""What the jobs share: argument types, the session, run loops, errors, the slow consumer; and
what the tests and benchmarks that run jobs and local sessions share with them: the local
session preset and the command that starts a job.

Kept beside the jobs, not in the package: it is about running a job from a shell (exit codes,
one-line errors, progress lines on stdout), not about flow control. The jobs import it as
``_common`` (their folder is on ``sys.path``); the tests (pytest's ``pythonpath``) and the
benchmarks (``bench/_report.py``) put this folder on ``sys.path`` and import it the same way.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from spark_flow import ConfigurationError, FlowProgress, FlowProgressListener, SparkFlowError, get_spark
from spark_flow.rules.keys import flow_conf
from spark_flow.rules.units import DURATIONS, parse_duration, parse_size
from spark_flow.spark.session import exit_process, is_connect, session_flow_conf, still_active, streaming_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

#: Exit status of a job refused before it started (bad option or spark.flow.* conf), as argparse.
EXIT_USAGE = 2
#: Exit status of a job that failed while running (a query failed, a queue refused a batch).
EXIT_FAILED = 1
#: Exit status of a job ended by Ctrl-C before its query started, or by a second one before its
#: query stopped (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: Set by Ctrl-C: the run loop stops the query between two waits.
INTERRUPTED = threading.Event()
#: Set by a Ctrl-C while the job starts (:func:`starting`): what the start waited for was cancelled.
CUT_START = threading.Event()
#: How often a Ctrl-C'd start cancels the Spark jobs it waits for, until it ends.
_CANCEL_EVERY = 0.5
_starting: list[None] = []  # one entry per open starting() block
_session: list[SparkSession] = []  # the job's session, once it is up
#: The repository: the jobs' folder's parent, where conf/ is.
ROOT = Path(__file__).resolve().parent.parent


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


def _positive(convert: Callable[[str], Any], what: str, name: str) -> Callable[[str], Any]:
    """An argparse type: ``convert``'s value of the text, which must be > 0 (argparse names the
    option when it fails)."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not > 0")
        return value

    parse.__name__ = parse.__qualname__ = name
    parse.__doc__ = f"An argparse type: {what} > 0."
    return parse


positive_int: Callable[[str], int] = _positive(int, "a whole number", "positive_int")
positive_float: Callable[[str], float] = _positive(float, "a number", "positive_float")


def size(text: str) -> int:
    """An argparse type: bytes, with spark-flow's units (``200``, ``1k``, ``2 MB``)."""
    try:
        return parse_size("size", text)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or with a unit: 512, 1k, 2MB)") from None


positive_size: Callable[[str], int] = _positive(lambda text: parse_size("size", text), "a size (bytes, or with a unit: "
                                                "512, 1k, 2MB)", "positive_size")
positive_duration: Callable[[str], float] = _positive(lambda text: parse_duration("duration", text),
                                                      DURATIONS, "positive_duration")


def interval(text: str) -> str:
    """An argparse type: a processing-time trigger, written as every duration of spark-flow's
    (``1 second``, ``500ms``, ``2min``; a plain number is milliseconds), returned as Spark takes it."""
    try:
        seconds = parse_duration("trigger", text, minimum=0.001)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval: allowed is {DURATIONS}") from None
    return f"{round(seconds * 1000)} milliseconds"


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
    stop_on_ctrl_c()  # from here: a session that waits for its cluster ends on Ctrl-C too
    with starting(), _keeping_ctrl_c():
        spark = get_spark({"spark.app.name": app_name})
        _session.append(spark)
    stop_on_ctrl_c()  # again: the SparkContext's start put a JVM handler of its own over the JVM's
    if is_connect(spark):
        # The jobs' foreachBatch functions run on the server, where this folder is not importable.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    else:  # a Connect server's log is the server's
        spark.sparkContext.setLogLevel("ERROR")
    check(session_flow_conf(spark))
    return spark


@contextmanager
def starting() -> Iterator[None]:
    """A job's start (its session, its queues, its query's plan; blocks nest): a Ctrl-C in it
    cancels the Spark jobs the start waits for, again and again until the block ends (a first
    executor that never comes: a cluster with no room), and the job ends with one line
    (:func:`main_guard`); a Ctrl-C before the session is up ends the job at once, nothing
    written. Ends with :class:`JobError` when a Ctrl-C came in it: the query is not started."""
    _starting.append(None)
    try:
        yield
    finally:
        _starting.pop()
    if CUT_START.is_set():
        raise JobError("interrupted before the query started", EXIT_INTERRUPTED)


@contextmanager
def _keeping_ctrl_c() -> Iterator[None]:
    """Keep the job's Ctrl-C handler while PySpark starts a SparkContext, which puts its own in
    (a ``cancelAllJobs`` and a ``KeyboardInterrupt`` with its traceback, see
    :func:`stop_on_ctrl_c`) seconds before the session it starts is the job's."""
    install = signal.signal

    def keep(signum: int, handler: Any) -> Any:
        return signal.getsignal(signum) if signum == signal.SIGINT else install(signum, handler)

    signal.signal = keep  # type: ignore[assignment]
    try:
        yield
    finally:
        signal.signal = install


def _cancel_start() -> None:
    """Run on a thread of its own by a Ctrl-C in :func:`starting` (the main thread may wait in a
    call to Spark, and a signal handler's call to the JVM would share that thread's connection):
    cancel what the start waits for while it lasts."""
    while _starting:
        if not _session:  # the session is still starting (its application waits for the cluster)
            emit("interrupted before the session started")
            exit_process(EXIT_INTERRUPTED)
        spark = _session[0]
        with suppress(Exception):  # a session stopping meanwhile: nothing left to cancel
            if is_connect(spark):
                spark.interruptAll()
            else:
                spark.sparkContext.cancelAllJobs()
        time.sleep(_CANCEL_EVERY)


def stop_on_ctrl_c() -> None:
    """Ctrl-C stops the job's query and ends the job, as ``--run-seconds`` does; a second one
    ends it at once (a restart goes on from the checkpoint, as after a kill).

    PySpark's own handler calls the JVM from inside the signal (``cancelAllJobs``) while the
    main thread waits on that connection, and py4j prints both failures with their tracebacks;
    spark-submit's JVM (the driver, or a Connect client's launcher), which gets the same Ctrl-C,
    stops the application under the query, or ends and takes the job's output with it. So that
    JVM ignores Ctrl-C, as PySpark has the JVM it starts itself do, and the signal only asks the
    run loop to stop; while the job starts (:func:`starting`), it cancels what the start waits for.
    """
    _jvm_ignores_ctrl_c()

    def interrupted(signum: int, frame: object) -> None:
        if INTERRUPTED.is_set():
            os._exit(EXIT_INTERRUPTED)
        INTERRUPTED.set()
        if _starting:
            CUT_START.set()
            threading.Thread(target=_cancel_start, name="cancel-start", daemon=True).start()

    signal.signal(signal.SIGINT, interrupted)


def _jvm_ignores_ctrl_c() -> None:
    """Have spark-submit's JVM ignore Ctrl-C (see :func:`stop_on_ctrl_c`)."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # started by spark-submit's JVM
        from pyspark import SparkContext

        SparkContext._ensure_initialized()  # its gateway (a Connect client's too)
        jvm = SparkContext._jvm
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("INT"), jvm.sun.misc.SignalHandler.SIG_IGN)


def local_conf(cores: int = 2) -> dict[str, str]:
    """The local session preset of the tests, the benchmarks and the processes they start:
    ``local[cores]`` with as many shuffle partitions and default parallelism, no UI, one
    partition for Delta's snapshot, and a minute at most for a query's stop.

    For :func:`spark_flow.get_spark` (which adds Delta), or as ``--conf`` of :func:`job_command`;
    merge a dict over it for more (``{**local_conf(1), "spark.driver.memory": "512m"}``).
    """
    return {
        "spark.master": f"local[{cores}]",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
        "spark.ui.enabled": "false",
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.sql.streaming.stopTimeout": "60s",
    }



def now() -> str:
    """The wall-clock time that starts each progress line."""
    return datetime.now().strftime("%H:%M:%S")


def emit(line: str) -> None:
    """Print one progress line at once (stdout is a pipe under spark-submit, so flush)."""
    print(f"{now()} {line}", flush=True)


def fmt_bool(value: bool) -> str:
    return "true" if value else "false"


def sleep_while(active: Callable[[], bool], seconds: float) -> None:
    """Sleep ``seconds``, returning early once ``active()`` is False, so ``query.stop()`` is prompt."""
    deadline = time.monotonic() + seconds
    while active() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))


def append_once(batch: DataFrame, output: str, app_id: str, batch_id: int) -> None:
    """Append ``batch`` to the Delta table ``output`` once: Delta's idempotent write for
    foreachBatch (``txnAppId`` = ``app_id``, ``txnVersion`` = the batch id), so a batch replayed
    after a restart from the same checkpoint is skipped."""
    (batch.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", str(batch_id))
     .save(output))


class ProgressLines(FlowProgressListener):
    """A job's progress line for each micro-batch of its query that moved messages, printed in
    the job's own process from the query's progress events (under Spark Connect the job's
    foreachBatch runs on the server, whose stdout is not the job's). Counts what it printed.

    ``role`` is the job's (``producer`` or ``consumer``), ``line`` formats one
    :class:`FlowProgress`, ``queues`` are the queues the query produces to (deltalake's
    ``storage_options`` for them).
    """

    def __init__(self, query_name: str, role: str, line: Callable[[FlowProgress], str],
                 queues: Sequence[str] = (), storage_options: Mapping[str, str] | None = None) -> None:
        super().__init__(queues, storage_options=storage_options)
        self.query_name = query_name
        self.role = role
        self.line = line
        self.batches = 0
        self.messages = 0
        self._query_id: str | None = None
        self._started = datetime.now()
        self._terminated = threading.Event()

    def onQueryStarted(self, event: Any) -> None:
        if event.name == self.query_name:
            self._query_id = str(event.id)
            self._started = datetime.fromisoformat(event.timestamp.replace("Z", "+00:00"))

    def onQueryProgress(self, event: Any) -> None:
        if event.progress.name == self.query_name:
            for flow in (f for f in self.reports(event.progress) if f.role == self.role):
                self.batches += 1
                self.messages += flow.count
                emit(self.line(flow))

    def onQueryTerminated(self, event: Any) -> None:
        if str(event.id) == self._query_id:
            self._terminated.set()

    def wait_for_last(self, timeout: float = 30.0) -> None:
        """Wait until the stopped query's last progress is printed (events come after the fact,
        in order, and its termination last)."""
        self._terminated.wait(timeout)

    def cut_short(self) -> list[FlowProgress]:
        """The batch the job's stop cut short (written in part or whole, not completed: a restart
        from the checkpoint finishes it), as its queues have it now."""
        return self.in_flight(self._query_id, self._started) if self._query_id else []


class SlowConsumer:
    """A foreachBatch function: a consumer that works ``seconds_per_row`` on each message (a sleep,
    cut short when its query stops), then appends the batch to the Delta table ``output`` exactly
    once (:func:`append_once`; ``app_id`` by default ``spark-flow-consumer/<query id>``, which a
    restart from the same checkpoint keeps; under Spark Connect, name the query ``query_name``).

    Subclasses look at each batch before its work (:meth:`read`, which returns its rows) and after
    it is written (:meth:`written`).
    """

    def __init__(self, output: str, seconds_per_row: float = 0.0, app_id: str | None = None,
                 query_name: str | None = None) -> None:
        self.output = output
        self.seconds_per_row = seconds_per_row
        self.app_id = app_id
        self.query_name = query_name
        self.batches = 0
        self.consumed = 0

    def read(self, batch: DataFrame) -> int:
        """The batch's rows (the batch is cached: reading it again costs no second read of the queue)."""
        return batch.count()

    def written(self, batch_id: int, rows: int) -> None:
        """Called once the batch is appended to ``output``."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        query = streaming_query(batch.sparkSession, self.query_name, required=self.app_id is None)
        active = still_active(query)
        app_id = self.app_id or f"spark-flow-consumer/{query.id}"
        batch = batch.persist()  # looked at, then written: read the queue once
        try:
            rows = self.read(batch)
            # Sleep first, write after: a stop cuts the sleep short and the batch is still written.
            # A write cut short by the stop fails the batch; the restart replays it (same txnVersion).
            sleep_while(active, rows * self.seconds_per_row)
            append_once(batch, self.output, app_id, batch_id)
        finally:
            batch.unpersist()
        self.batches += 1
        self.consumed += rows
        self.written(batch_id, rows)


def run_query(query: StreamingQuery, run_seconds: float | None,
              keep_running: Callable[[], bool] = lambda: False) -> float:
    """Wait for ``query`` for ``run_seconds`` (forever without), then as long as ``keep_running()``;
    stop it and return the seconds it ran.

    A query that ended on its own with an error raises :class:`JobError`, described as Spark
    reports it (a spark-flow error by its own line). Errors of a batch cut short by the job's own
    stop (a held batch interrupted) are not failures: a restart finishes it.
    """
    started, stopped_here = time.monotonic(), False
    try:
        while query.isActive:
            if INTERRUPTED.is_set():
                emit("interrupted; stopping the query")
                stopped_here = True
                break
            if run_seconds is not None and time.monotonic() - started >= run_seconds and not keep_running():
                stopped_here = True
                break
            try:
                query.awaitTermination(0.5)
            except Exception:
                break  # it failed; reported below
    finally:
        query.stop()
    failed = None if stopped_here else query.exception()
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
    as argparse does for a bad option; other failures exit 1; a start ended by Ctrl-C (whatever
    the cancelled wait raised) says so and exits 130.
    """
    try:
        main(argv)
    except Exception as error:
        if CUT_START.is_set():
            emit("interrupted before the query started")
            exit_process(EXIT_INTERRUPTED)
        _fail(error)
    exit_process(0)


def _fail(error: Exception) -> NoReturn:
    """End a job that failed: one line on stderr (an unexpected error's traceback before it:
    the process must end, see exit_process)."""
    if isinstance(error, ConfigurationError):
        print(f"error: {error}", file=sys.stderr, flush=True)
        exit_process(EXIT_USAGE)
    if isinstance(error, SparkFlowError):
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        exit_process(EXIT_FAILED)
    if isinstance(error, JobError):
        print(f"error: {error}", file=sys.stderr, flush=True)
        exit_process(error.status)
    traceback.print_exception(error)
    print(f"error: {describe(error)}", file=sys.stderr, flush=True)
    exit_process(EXIT_FAILED)


def job_command(job: str, *args: str, conf: Mapping[str, str] | None = None, cores: int = 1,
                remote: str | None = None) -> list[str]:
    """The command line that runs ``jobs/<job>.py`` (``producer``, ``consumer``, ``controller``)
    with its ``args`` through the spark-submit beside this interpreter: conf/spark-defaults.conf,
    the local session preset of ``cores`` (:func:`local_conf`), then ``conf``. With ``remote``
    (``sc://host:port``), as a Spark Connect client of that server, with ``conf`` only."""
    submit = str(Path(sys.executable).parent / "spark-submit")
    if remote:
        return [submit, "--remote", remote, *(part for key, value in (conf or {}).items() for part in
                                              ("--conf", f"{key}={value}")), str(ROOT / "jobs" / f"{job}.py"), *args]
    confs = {**local_conf(cores), **(conf or {})}
    return [submit, "--properties-file", str(ROOT / "conf" / "spark-defaults.conf"),
            *(part for key, value in confs.items() for part in ("--conf", f"{key}={value}")),
            str(ROOT / "jobs" / f"{job}.py"), *args]


def start_job(job: str, *args: str, conf: Mapping[str, str] | None = None, cores: int = 1,
              remote: str | None = None, env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen[Any]:
    """Start :func:`job_command` as a process in the repository, its driver and Python workers
    running this interpreter, with ``env`` over this process's environment (``HADOOP_CONF_DIR``
    for ``--master yarn``); ``popen`` goes to :class:`subprocess.Popen` (``stdout``,
    ``start_new_session``, ...)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, **(env or {})}
    return subprocess.Popen(job_command(job, *args, conf=conf, cores=cores, remote=remote), cwd=ROOT, env=env,
                            **popen)
