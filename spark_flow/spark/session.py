"""A SparkSession with Delta configured, created once or taken as it is.

Local runs and tests get a session with Delta's extension, catalog and jars (resolved from
Maven Central by Spark's package resolution); a session that already exists (Databricks, a
spark-submit job, a notebook) is used as it is, and settings given on spark-submit are kept.
With ``SPARK_REMOTE`` set (``spark-submit --remote sc://...``) it is a Spark Connect session.
Everything else in spark-flow takes either kind of session; the few things only one kind has
are here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, NoReturn

from spark_flow.exceptions import ConfigurationError
from spark_flow.rules.keys import flow_conf
from spark_flow.rules.storage_options import storage_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

#: Delta's jars for Spark 4.2 / Scala 2.13. delta-spark 4.4.1's Python package is pinned, but
#: its 4.4.1 jars are not on Maven Central; the 4.4.0 jars are, and they speak the same API.
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
#: Dependencies of those jars that Spark 4.2 ships itself, in newer versions. Resolved again they
#: add about 80 MB of jars to every application, shadowed by Spark's own (which its class loader
#: puts first), and about 3 s to every start.
SPARK_PROVIDED = (
    "org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.parquet:parquet-hadoop", "org.apache.parquet:parquet-column", "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding", "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-jackson", "com.fasterxml.jackson.core:jackson-databind",
    "com.fasterxml.jackson.core:jackson-core", "com.fasterxml.jackson.core:jackson-annotations",
    "org.slf4j:slf4j-api", "org.apache.logging.log4j:log4j-api", "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl", "com.github.luben:zstd-jni", "org.xerial.snappy:snappy-java",
    "org.roaringbitmap:RoaringBitmap", "com.google.code.findbugs:jsr305", "io.airlift:aircompressor",
    "commons-pool:commons-pool", "org.locationtech.jts:jts-core",
)

DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Defaults for a session spark-flow creates; anything already set (spark-submit --conf,
#: spark-defaults.conf, the ``conf`` argument) wins.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "spark-flow",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    # Stopping a query that reads a Python data source overflowed the default thread stack.
    "spark.driver.extraJavaOptions": "-Xss16m",
    "spark.ui.showConsoleProgress": "false",
}


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (Databricks serverless and standard access
    mode, ``SparkSession.builder.remote``, ``spark-submit --remote``): no JVM on this side, so
    no ``sparkContext`` and no thread-local properties."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


@contextlib.contextmanager
def with_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """``spark``'s conf with ``conf`` set while the block runs, then as it was: a key set before
    gets its value back, one that was not is unset again."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, was in before.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


def streaming_query(spark: SparkSession, name: str | None = None, *, required: bool = True) -> StreamingQuery | None:
    """The streaming query running the foreachBatch call that was given ``spark`` (the batch's
    session), as the user's session sees it; None outside a streaming query.

    Classic Spark names it in a thread-local property, and only the user's own session lists
    it (the batch's session is a clone). Spark Connect has no thread-local properties, and the
    batch's session is the user's: the query is the active one named ``name`` (the query's
    ``queryName``), or the only active one. When that cannot tell, raises
    :class:`ConfigurationError` (before anything is written), or returns None if not ``required``.
    """
    from pyspark.sql import SparkSession

    if not is_connect(spark):
        query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
        return SparkSession.builder.getOrCreate().streams.get(query_id) if query_id else None
    active = spark.streams.active
    named = [q for q in active if q.name == name] if name else active
    if len(named) == 1:
        return named[0]
    if not required:
        return None
    running = ", ".join(repr(q.name or str(q.id)) for q in active) or "none"
    raise ConfigurationError("query_name", name, "under Spark Connect, the name of this streaming query "
                                                 f"(.queryName(...)) among the session's active ones: {running}",
                             "Connect tells a foreachBatch function nothing of its query: name the query, "
                             "and give the same name to QueueSink(query_name=...), or give QueueSink(app_id=...)")


def still_active(query: StreamingQuery | None) -> Callable[[], bool]:
    """Whether ``query`` is still running, asked each time: a held or sleeping foreachBatch call
    returns once its query is stopped. Outside a query (None), always True."""
    return (lambda: query.isActive) if query is not None else (lambda: True)


def get_spark(conf: Mapping[str, str] | None = None) -> SparkSession:
    """Return the active SparkSession, or create one with Delta configured.

    Parameters
    ----------
    conf : mapping, optional
        Settings for a session created here (``spark.master``, ``spark.flow.*``, ...). They do
        not override what spark-submit or spark-defaults.conf already set, and they are not
        applied to a session that exists already.

    Notes
    -----
    Python workers run the interpreter running this code (``PYSPARK_PYTHON``), unless one is
    named already: another interpreter may lack pyarrow.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = (conf or {}).get("spark.remote") or os.environ.get("SPARK_REMOTE") or _submitted_conf().get("spark.remote")
    if remote:
        return _remote_session(remote, conf or {})
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Under spark-submit its JVM is up and holds --master, --conf and spark-defaults.conf:
        # connect first, so that SparkConf reads them and the defaults below only fill gaps.
        SparkContext._ensure_initialized()
    spark_conf = SparkConf()
    for key, value in {**LOCAL_DEFAULTS, **DELTA_CONF, **(conf or {})}.items():
        spark_conf.setIfMissing(key, value)
    extensions = spark_conf.get("spark.sql.extensions") or ""
    if DELTA_CONF["spark.sql.extensions"] not in extensions:
        spark_conf.set("spark.sql.extensions", f"{extensions},{DELTA_CONF['spark.sql.extensions']}")
    packages = spark_conf.get("spark.jars.packages", "")
    if "io.delta:delta-spark" not in packages and "delta-spark" not in spark_conf.get("spark.jars", ""):
        spark_conf.set("spark.jars.packages", ",".join(p for p in (packages, DELTA_PACKAGE) if p))
        spark_conf.setIfMissing("spark.jars.excludes", ",".join(SPARK_PROVIDED))
    # Python data source planning reads PYSPARK_PYTHON, not spark.pyspark.python: set both.
    python = spark_conf.get("spark.pyspark.python", None) or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", python)
    spark_conf.setIfMissing("spark.pyspark.python", python)
    return SparkSession.builder.config(conf=spark_conf).getOrCreate()


#: What a Spark Connect URL may be, as an error says it.
REMOTE_URLS = "sc://host[:port][/;param=value;...] (PySpark's Spark Connect URL; port 15002 by default)"


def remote_session(url: str, conf: Mapping[str, str] | None = None, *, key: str = "spark.remote") -> SparkSession:
    """A Spark Connect session on ``url`` for an entry point that was given one (``key`` names
    where: the CLI's ``--remote``, ``SPARK_REMOTE``), with the ``spark.flow.*`` entries of ``conf``
    set. The URL is checked first (:class:`ConfigurationError`), then the server's first answer
    is awaited a second or two (:class:`~spark_flow.exceptions.EngineUnreachableError`): PySpark's
    client retries a server that is not there for ten minutes. A URL's ``token`` is never shown."""
    import warnings

    from pyspark.errors import PySparkValueError
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.client.retries import DefaultPolicy

    from spark_flow.exceptions import EngineUnreachableError, one_line

    shown = re.sub(r"(?i)(;token=)[^;]*", r"\1***", url)
    try:
        DefaultChannelBuilder(url)
    except PySparkValueError as error:
        said = re.sub(r"^\[\w+\]\s*(Invalid URL for Spark Connect: )?", "", one_line(error)).replace(url, shown)
        said = said.split(" Please update")[0]
        raise ConfigurationError(key, shown, REMOTE_URLS, said) from None
    spark = SparkSession.builder.remote(url).getOrCreate()
    client = spark.client
    policies = client.get_retry_policies()
    client.set_retry_policies([DefaultPolicy(max_retries=3, max_backoff=1000)])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PySpark's "[RETRIES_EXCEEDED]" warning: the error says it
            spark.version  # noqa: B018  (the first call to the server)
    except Exception as error:
        spark.release_session_on_close = False  # type: ignore[attr-defined]  # nothing to release there
        spark.stop()
        found = re.search(r'details = "([^"]*)"', str(error))
        raise EngineUnreachableError(key, shown, (found.group(1) if found else one_line(error))[:300]) from None
    finally:
        client.set_retry_policies(policies)
    return _remote_session(url, conf or {})


def _remote_session(url: str, conf: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session with the ``spark.flow.*`` entries of ``conf`` and of
    ``spark-submit --remote --conf`` (which PySpark passes on for ``spark.sql.*`` keys only).
    The server's own configuration has Delta; static settings cannot be set from a client."""
    from pyspark.sql import SparkSession

    given = {**_submitted_conf(), **conf}
    spark = SparkSession.builder.remote(url).getOrCreate()
    for key, value in given.items():
        if key.startswith("spark.flow."):
            spark.conf.set(key, value)
    return spark


def _submitted_conf() -> dict[str, str]:
    """What ``spark-submit --remote`` passes a Python client: its ``--conf`` entries and the
    server's ``spark.remote``, in ``PYSPARK_REMOTE_INIT_CONF_<i>`` environment variables."""
    submitted: dict[str, str] = {}
    for i in range(int(os.environ.get("PYSPARK_REMOTE_INIT_CONF_LEN", "0"))):
        submitted.update(json.loads(os.environ[f"PYSPARK_REMOTE_INIT_CONF_{i}"]))
    return submitted


_before_stop: list[Callable[[], None]] = []  # run by exit_process before it stops the session


def close_before_stop(close: Callable[[], None]) -> None:
    """Have :func:`exit_process` call ``close`` (once, however often given) before it stops the
    session: what holds a stream to a Spark Connect server (a query listener) ends it itself,
    rather than have the stop cut it."""
    if close not in _before_stop:
        _before_stop.append(close)


def exit_process(status: int = 0) -> NoReturn:
    """End a driver process (a job, a script) with ``status``, its SparkSession stopped first
    (what :func:`close_before_stop` was given closed before that).

    Leaves through ``os._exit``: at interpreter shutdown deltalake's native threads can abort
    the process ("terminate called without an active exception", delta-io/delta-rs#2184),
    which turns a job that finished into exit status 134. A failure's status under spark-submit
    is its JVM's to give (:func:`_end_spark_submit`).
    """
    from pyspark.sql import SparkSession

    for close in _before_stop:
        with contextlib.suppress(Exception):  # the process ends whatever a close meets (a server gone)
            close()
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    sys.stdout.flush()
    sys.stderr.flush()
    if status and "PYSPARK_GATEWAY_PORT" in os.environ:
        _end_spark_submit(status)
    os._exit(status)


def _end_spark_submit(status: int) -> None:
    """End spark-submit's JVM, which started this Python program, with ``status``, once it has
    copied all this program printed.

    spark-submit prints the stack of a ``SparkUserAppException`` under the one line a job ends
    with when its Python program exits with a failure's status (conf/spark-defaults.conf's
    ``spark.submit.callSystemExitOnMainExit``); its JVM ending first with that status prints
    nothing. Its thread "redirect output" copies this program's output (stdout and stderr, one
    pipe): with both closed here, it reads to the end and stops, and the JVM exits after it."""
    from pyspark import SparkContext

    with contextlib.suppress(Exception):  # a JVM gone already: this program's own exit says it all
        SparkContext._ensure_initialized()
        jvm = SparkContext._jvm
        assert jvm is not None
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        for thread in jvm.java.lang.Thread.getAllStackTraces().keySet():
            if thread.getName() == "redirect output":
                thread.join(_OUTPUT_COPIED_WITHIN_MS)
        jvm.java.lang.System.exit(status)  # never answers: the JVM ends, and the call with it


#: How long the JVM may take to copy what this program printed before it ends anyway: a child
#: process that kept the pipe open would keep the copy going.
_OUTPUT_COPIED_WITHIN_MS = 5000


def session_flow_conf(spark: SparkSession) -> dict[str, str]:
    """The ``spark.flow.*`` entries of a session's run-time conf, as set now (a classic or a
    Spark Connect session). Read once where a query, a queue or the controller is set up."""
    return flow_conf(spark.conf.getAll)


def session_storage_options(spark: SparkSession) -> dict[str, str]:
    """The storage options of a session's conf (classic or Spark Connect), as set now."""
    return storage_options(dict(spark.conf.getAll))
