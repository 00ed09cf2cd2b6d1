"""One local SparkSession with Delta per worker (local[2], few partitions, no UI), one class-data
archive and one compiled PySpark shared by every JVM and Python worker the suite starts, and the
suite's tiers: a test that starts another process (a Spark application, a server, the CLI, a
fresh interpreter) is marked ``processes``, one that uses the session ``spark``; ``make check``
runs the others. ``make test`` runs two xdist workers: the ``processes`` tests one at a time on
one of them (their group), everything else on the other (with the short ``processes`` tests, and
the kill -9 trials of producer and consumer: in the group, it ended 140 s after the other)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import support.invariants
import support.processes
import support.streams
from _common import local_conf
from pyspark.sql import SparkSession
from support.stores import Store

from spark_flow.spark.session import get_spark

# tests/test_readme.py (its README sections are moving to docs/ pages, and it with them) still
# imports three helpers by their names from before tests/support/: the same modules under both
# names until it imports ``support.<module>``; then these lines go.
sys.modules.update({"invariants": support.invariants, "processes": support.processes, "streams": support.streams})

TEST_CONF = {**local_conf(2), "spark.app.name": "spark-flow-tests", "spark.pyspark.python": sys.executable}


#: The JVMs the suite starts as processes compile with the client compiler only: each lives
#: seconds to a minute, too short for the server compiler's work to pay back on 2 cores (a
#: producer job's run here: 23 s of CPU and 13 s of wall time with both compilers, 11 s and 9 s
#: with C1 alone). The suite's own session keeps both (see ``spark``).
JIT = "-XX:TieredStopAtLevel=1"

#: Every Spark application of the suite plans for the batches it runs, of tens to thousands of
#: rows: no whole-stage code generation and no adaptive execution, each a compile or a second
#: plan per query that such batches never pay back (the session's flow and controller tests: a
#: fifth less CPU, 209 to 168 CPU seconds). Java system properties, which every SparkConf reads:
#: they reach the jobs, the servers and the README's lines as written.
SMALL_BATCHES = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.adaptive.enabled=false"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Have every JVM of the suite map one class-data archive (AppCDS) of Spark's classes, and
    every Python worker Spark starts import PySpark compiled.

    The suite starts about 45 JVMs (its sessions, spark-submit jobs, the kill -9 trials' processes, YARN containers);
    with the archive a JVM's start and first Delta write take about 10 s instead of 17 s on 2 cores.
    The archive is made once per Spark version, by running the producer job for a few seconds
    (about 50 s), and kept in pytest's cache. ``JDK_JAVA_OPTIONS`` reaches every ``java`` started
    below this process (with :data:`JIT` and :data:`SMALL_BATCHES`); a JVM whose class path the
    archive does not match runs without it. ``SPARK_HOME`` (:func:`_compiled_spark_home`) reaches
    every Spark started below it.
    """
    _font_cache()
    if getattr(session.config, "cache", None) is None:  # -p no:cacheprovider: no place to keep it
        os.environ["JDK_JAVA_OPTIONS"] = SMALL_BATCHES
        return
    import pyspark

    os.environ["SPARK_HOME"] = str(_compiled_spark_home(session.config.cache.mkdir("spark-home")))
    archive = session.config.cache.mkdir("jvm") / f"spark-{pyspark.__version__}-compiled-home.jsa"
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # spark-class parses its launcher's stdout
    if not archive.exists():
        _archive_classes(archive.with_suffix(".tmp"), quiet)
        archive.with_suffix(".tmp").rename(archive)
    os.environ["JDK_JAVA_OPTIONS"] = f"-XX:SharedArchiveFile={archive} {quiet} {JIT} {SMALL_BATCHES}"


def _font_cache() -> None:
    """Have matplotlib's font cache made before any test: on a machine without one, the first
    plot lists the system's fonts with ``fc-list``, a process a quick-tier test may not start
    (a fresh machine's ``make check`` failed the plot tests so)."""
    import matplotlib.font_manager  # noqa: F401  (builds the cache once, reads it after)


def _compiled_spark_home(cache: Path) -> Path:
    """A Spark home as the pip-installed one (links to its jars, scripts and files), but for the
    ``python/lib/pyspark.zip`` Spark puts first on its Python workers' path: this one holds every
    module compiled. Python's zip import never writes bytecode, so each Python process Spark
    starts (a streaming data source's runner, one per query; each application's worker daemon)
    would compile PySpark afresh: 0.4 s of CPU each on a quiet machine, 1.5 s on a busy one, a
    few hundred times a run. Made once per PySpark version (10 s) and kept in pytest's cache."""
    import compileall
    import py_compile
    import shutil
    import zipfile

    import pyspark

    installed = Path(pyspark.__file__).parent
    home = cache / pyspark.__version__
    if (home / "python" / "lib" / "pyspark.zip").exists():
        return home
    made = home.with_suffix(".tmp")
    shutil.rmtree(made, ignore_errors=True)
    (made / "python" / "lib").mkdir(parents=True)
    for entry in installed.iterdir():
        if entry.name != "python":
            (made / entry.name).symlink_to(entry)
    for entry in (installed / "python").iterdir():
        if entry.name != "lib":
            (made / "python" / entry.name).symlink_to(entry)
    for entry in (installed / "python" / "lib").iterdir():
        if entry.name != "pyspark.zip":
            (made / "python" / "lib" / entry.name).symlink_to(entry)
    with tempfile.TemporaryDirectory() as sources:
        with zipfile.ZipFile(installed / "python" / "lib" / "pyspark.zip") as original:
            original.extractall(sources)
        compileall.compile_dir(sources, quiet=1, legacy=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        with zipfile.ZipFile(made / "python" / "lib" / "pyspark.zip", "w", zipfile.ZIP_DEFLATED) as compiled:
            for path in sorted(Path(sources).rglob("*")):
                compiled.write(path, path.relative_to(sources).as_posix())
    made.rename(home)
    return home


def _archive_classes(archive: Path, quiet: str) -> None:
    """Run the producer job for 4 s through spark-submit, whose driver JVM writes the classes it
    loaded to ``archive`` when it exits (spark-submit returns after that)."""
    from support.processes import failure, spark_submit

    with tempfile.TemporaryDirectory() as queue:
        result = spark_submit("producer", "--queue", f"{queue}/q", "--run-seconds", "4", timeout=600,
                              conf={"spark.driver.extraJavaOptions": f"-Xss16m -XX:ArchiveClassesAtExit={archive} {quiet}"})
    if result.returncode != 0:
        raise RuntimeError(f"making the class-data archive failed: {failure(result)}")


#: Fixtures that start servers (processes of their own): a test that uses one is marked ``processes``.
SERVERS = {"spark_connect", "connect_session", "spark_cluster", "s3_server", "azurite_server", "gcs_server",
           "yarn_cluster", "governed_connect"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups: after it, none was ever made
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what the tiers need: ``spark`` on every test that uses the suite's session, and
    ``processes`` on every test that uses a server (directly or through an object ``store``) or
    is marked ``short_processes``. The ``processes`` tests are one xdist group, one at a time on
    one worker, but for the ``short_processes`` ones (short commands that start no Spark
    application or server and wait for no time) and the ``beside_group`` one (the producer
    and consumer kill -9 trials), which run beside the group like any other test. Every
    other test is the ``session`` group, on the other worker: none is left to the group's worker
    after the group. The group's ``mostly_waiting`` tests run first: beside the other worker's
    tests they cost little, and at the end, alone, they left a core idle."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "spark" in names:
            item.add_marker(pytest.mark.spark)
        param = getattr(getattr(item, "callspec", None), "params", {}).get("store", "local")
        short = item.get_closest_marker("short_processes") is not None
        if names & SERVERS or param != "local" or short:
            item.add_marker(pytest.mark.processes)
        beside = short or item.get_closest_marker("beside_group") is not None
        if item.get_closest_marker("processes") is not None and not beside:  # one at a time: 2 cores, timed waits
            item.add_marker(pytest.mark.xdist_group("processes"))
        else:
            item.add_marker(pytest.mark.xdist_group("session"))
    items.sort(key=lambda item: item.get_closest_marker("mostly_waiting") is None)  # stable: the rest in order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test not marked ``processes`` fails if it starts a process: the quick tier (``-m "not
    processes"``) holds only tests that need no other process, and this keeps it so."""
    if item.get_closest_marker("processes") is not None:
        return (yield)
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def refuse(popen: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        raise AssertionError(f"{item.nodeid} started a process ({args!r}) but is not marked processes "
                             "(pytestmark = pytest.mark.processes)")

    subprocess.Popen._execute_child = refuse  # type: ignore[attr-defined]
    try:
        return (yield)
    finally:
        subprocess.Popen._execute_child = execute  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def spark_connect_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the suite's Spark Connect server logs (warnings and errors)."""
    return tmp_path_factory.mktemp("connect") / "server.log"


@pytest.fixture(scope="session")
def spark_connect(spark_connect_log: Path) -> Iterator[str]:
    """A local Spark Connect server for the suite; its ``sc://`` URL."""
    from support.servers import spark_connect_server

    with spark_connect_server(spark_connect_log) as url:
        yield url


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Keep each phase's report on the test (``item.failed_call``), for fixtures that clean up
    after a failure."""
    report = yield
    if report.when == "call":
        item.failed_call = report.failed  # type: ignore[attr-defined]
    return report


@pytest.fixture
def connect_session(spark_connect: str, spark_connect_log: Path,
                    request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """A function that gives a Spark Connect URL with a session of its own (one per client).

    A client that failed may leave its streaming queries running on the suite's server, taking
    a core from every test after it: after a failed test, each of its sessions' queries is
    stopped and the session released (by a client process that attaches to it), and the
    server log's tail is printed (in the test's report)."""
    urls: list[str] = []

    def new() -> str:
        urls.append(f"{spark_connect}/;session_id={uuid.uuid4()}")
        return urls[-1]

    yield new
    if getattr(request.node, "failed_call", False) and urls:
        script = ("import sys\nfrom pyspark.sql import SparkSession\nfor url in sys.argv[1:]:\n"
                  "    spark = SparkSession.builder.remote(url).getOrCreate()\n"
                  "    for query in spark.streams.active:\n        query.stop()\n    spark.stop()\n")
        subprocess.run([sys.executable, "-c", script, *urls], capture_output=True, timeout=120, check=False)
        print(f"the Spark Connect server's log ({spark_connect_log}), its end:\n"
              f"{spark_connect_log.read_text(errors='replace')[-12000:]}")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The suite's session. Its JVM lives as long as the suite and runs most of its Spark work:
    it keeps both compilers (with C1 alone the tests in it took a fifth longer)."""
    options = os.environ.get("JDK_JAVA_OPTIONS")
    if options is not None:
        os.environ["JDK_JAVA_OPTIONS"] = options.replace(JIT, "").strip()
    try:
        session = get_spark(TEST_CONF)
    finally:
        if options is not None:
            os.environ["JDK_JAVA_OPTIONS"] = options
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def no_query_outlives_its_module() -> Iterator[None]:
    """Stop streaming queries a module left running: a forgotten query would go on taking one of
    the two cores from every test after it. (A module without Spark starts no session here.)"""
    yield
    spark = SparkSession.getActiveSession()
    for query in spark.streams.active if spark is not None else []:
        print(f"\nstopping query {query.name or query.id}, left running by a test module")
        query.stop()


@dataclass(frozen=True)
class Governed:
    """A Spark Connect server whose engine alone holds the storage's credentials: its ``url``,
    the S3 ``endpoint`` (bucket ``flow``), the engine's ``key`` and ``secret`` (for the test's
    own checks), the object store conf without them (what a client or the CLI is given) and the
    environment its Python and a client's run with (instance metadata refusing)."""

    url: str
    endpoint: str
    key: str
    secret: str
    conf: dict[str, str]
    env: dict[str, str]


@pytest.fixture(scope="session")
def governed_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Governed]:
    """Governed compute, as Databricks standard and serverless compute are: an S3 server that
    refuses unsigned requests, and a Spark Connect server whose JVM reaches it with keys from a
    Hadoop credential store (in no Spark conf, no environment, nothing Python reads as storage
    options) while its Python workers, like a sandbox's, have no credentials and no instance
    metadata."""
    from support.servers import (
        hadoop_credential_store,
        refusing_http_server,
        signed_s3_server,
        spark_connect_server,
    )
    from support.stores import OBJECT_STORAGE_CONF, s3_conf

    base = tmp_path_factory.mktemp("governed")
    with signed_s3_server(base / "s3.log", "flow") as (endpoint, key, secret), refusing_http_server() as metadata:
        conf = {k: v for k, v in s3_conf(endpoint).items() if not k.endswith((".access.key", ".secret.key"))}
        store = hadoop_credential_store(base / "s3.jceks", {"fs.s3a.access.key": key, "fs.s3a.secret.key": secret})
        env = {"AWS_METADATA_ENDPOINT": metadata}
        server = {**conf, "spark.hadoop.hadoop.security.credential.provider.path": store}
        with spark_connect_server(base / "connect.log", properties=OBJECT_STORAGE_CONF, conf=server, env=env) as url:
            yield Governed(url, endpoint, key, secret, conf, env)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The suite's standalone Spark cluster: its master URL, and the worker's directory that holds
    each application's executors (``<app id>/<executor id>/stderr``)."""
    from support.servers import spark_standalone_cluster

    work = tmp_path_factory.mktemp("cluster")
    with spark_standalone_cluster(work) as master:
        yield master, work / "worker"


@pytest.fixture(scope="module")  # stopped after its module: the YARN case runs first (mostly_waiting)
def yarn_cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """The suite's HDFS and YARN (Hadoop's mini cluster, one JVM): the namenode's ``hdfs://`` URL
    and the cluster's Hadoop conf directory (spark-submit's ``HADOOP_CONF_DIR``). Its jars and
    compiled launcher are kept in pytest's cache."""
    from support.servers import hadoop_mini_cluster

    cache = request.config.cache.mkdir("hadoop") if getattr(request.config, "cache", None) else tmp_path_factory.mktemp("jars")
    with hadoop_mini_cluster(tmp_path_factory.mktemp("hadoop"), cache) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The suite's S3 server (moto) with a bucket ``flow``; its endpoint URL."""
    from support.servers import create_bucket, moto_s3_server

    with moto_s3_server(tmp_path_factory.mktemp("moto") / "server.log") as endpoint:
        create_bucket(endpoint, "flow")
        yield endpoint


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The suite's Azure Blob server (Azurite) with a container ``flow``; the account's endpoint."""
    from support.servers import azurite_blob_server, create_container

    base = tmp_path_factory.mktemp("azurite")
    with azurite_blob_server(base / "data", base / "server.log") as endpoint:
        create_container(endpoint, "flow")
        yield endpoint


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """The suite's Google Cloud Storage server (fake-gcs-server, built from ``tests/gcs``) with a
    bucket ``flow``: its URL, the GCS connector's jar that Spark reaches it with, the server's binary."""
    from support.servers import build_gcs_server, gcs_connector, gcs_server

    binary, connector = build_gcs_server(), gcs_connector(tmp_path_factory.mktemp("mvn"))
    with gcs_server(binary, "flow", tmp_path_factory.mktemp("gcs") / "server.log") as endpoint:
        yield endpoint, str(connector), binary


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The storage a test runs on, by its parameter (``indirect``): ``local`` (the test's temporary
    directory), ``s3`` (the S3 server, ``s3a://flow/<test>``), ``abfs`` (Azurite,
    ``abfs://flow@devstoreaccount1.dfs.core.windows.net/<test>``) or ``gcs`` (the GCS server,
    ``gs://flow/<test>``)."""
    from support.servers import AZURITE_ACCOUNT, AZURITE_KEY
    from support.stores import abfs_conf, gcs_conf, s3_conf

    kind, unique = getattr(request, "param", "local"), f"{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    if kind == "s3":
        return Store(kind, f"s3a://flow/{unique}", s3_conf(request.getfixturevalue("s3_server")))
    if kind == "abfs":
        conf = abfs_conf(request.getfixturevalue("azurite_server"), AZURITE_ACCOUNT, AZURITE_KEY)
        return Store(kind, f"abfs://flow@{AZURITE_ACCOUNT}.dfs.core.windows.net/{unique}", conf)
    if kind == "gcs":
        endpoint, connector, _binary = request.getfixturevalue("gcs_server")
        return Store(kind, f"gs://flow/{unique}", gcs_conf(endpoint, connector))
    return Store(kind, str(tmp_path))


@pytest.fixture(scope="session")
def chromium_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Headless Chromium for the suite (a selenium WebDriver), with a fresh profile."""
    from support.servers import chromium

    base = tmp_path_factory.mktemp("chromium")
    with chromium(base / "profile", base / "chromedriver.log") as driver:
        yield driver


@pytest.fixture
def browser(chromium_driver: Any) -> Iterator[Any]:
    """The suite's Chromium on a blank page, and left on one: a console page left open asks its
    gone server's port every 2 s, and whatever listens there next (a Spark JVM's socket for a
    new Python worker) reads the requests (see test_console)."""
    chromium_driver.get("about:blank")
    yield chromium_driver
    chromium_driver.get("about:blank")
