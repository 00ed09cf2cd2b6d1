"""The suite's fixtures: one local SparkSession with Delta per worker (local[2], few partitions,
no UI), the servers a ``processes`` test starts once (Spark Connect, a standalone cluster, S3,
Azure Blob, GCS, HDFS with YARN, governed compute, Chromium), the storage a test runs on, a
home declared by the command line and a subscriptions table, and the cleanup after a failed
test or a module that left a query running. The tiers (folders, markers, xdist groups, the
quick tier's guard) are the plugin ``support.tiers``; the JVM tuning is ``support.jvm``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _common import local_conf
from pyspark.sql import SparkSession
from support.servers import Governed
from support.stores import IO_SCHEMA, Io, Store, object_store

from spark_flow.records.subscriptions import SubscriptionTable
from spark_flow.spark.session import get_spark

pytest_plugins = ["support.jvm", "support.tiers"]

TEST_CONF = {**local_conf(2), "spark.app.name": "spark-flow-tests", "spark.pyspark.python": sys.executable}


@pytest.fixture(scope="session")
def spark_connect_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the suite's Spark Connect server logs (warnings and errors)."""
    return tmp_path_factory.mktemp("connect") / "server.log"


@pytest.fixture(scope="session")
def spark_connect_server_pid(spark_connect_log: Path) -> Iterator[tuple[str, int]]:
    """A local Spark Connect server for the suite: its ``sc://`` URL and its JVM's process id."""
    from support.servers import spark_connect_server

    with spark_connect_server(spark_connect_log) as server:
        yield server


@pytest.fixture(scope="session")
def spark_connect(spark_connect_server_pid: tuple[str, int]) -> str:
    """The suite's Spark Connect server's ``sc://`` URL."""
    return spark_connect_server_pid[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Keep each phase's report on the test (``item.failed_call``), for fixtures that clean up
    after a failure."""
    report = yield
    if report.when == "call":
        item.failed_call = report.failed  # type: ignore[attr-defined]
    return report


@pytest.fixture
def connect_session(spark_connect_server_pid: tuple[str, int], spark_connect_log: Path,
                    request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """A function that gives a Spark Connect URL with a session of its own (one per client).

    A client that failed may leave its streaming queries running on the suite's server, taking
    a core from every test after it: after a failed test, the stacks of the server's query
    threads are printed (where a query that stopped making progress waits), each of its
    sessions' queries is stopped and the session released (by a client process that attaches
    to it), and the server log's tail is printed (in the test's report)."""
    from support.servers import stream_threads

    spark_connect, pid = spark_connect_server_pid
    urls: list[str] = []

    def new() -> str:
        urls.append(f"{spark_connect}/;session_id={uuid.uuid4()}")
        return urls[-1]

    yield new
    if getattr(request.node, "failed_call", False) and urls:
        print(f"the Spark Connect server's query threads:\n{stream_threads(pid)}")
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
    from support.jvm import JIT  # the plugin: imported by pytest_plugins, not before

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


@pytest.fixture(params=["deltalake", "engine"])
def io(request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Path) -> Iterator[Io]:
    """How the test's processes reach the tables (``spark.flow.io``): deltalake in this Python, on
    paths; or the engine, the session itself, on catalog names, a queue and its home as tables of
    one schema, as on governed compute (docs/design.md 2.10): one test, both stores."""
    found = Io(request.param, tmp_path)
    spark.conf.set("spark.flow.io", found.mode)
    if found.mode == "engine":  # the schema's location is the catalog's storage, not the test's concern
        spark.sql(f"CREATE DATABASE {IO_SCHEMA} LOCATION '{tmp_path / 'warehouse'}'")
        spark.conf.set("spark.flow.home", IO_SCHEMA)
    try:
        yield found
    finally:
        spark.conf.unset("spark.flow.io")
        if found.mode == "engine":
            spark.conf.unset("spark.flow.home")
            spark.sql(f"DROP DATABASE IF EXISTS {IO_SCHEMA} CASCADE")


@pytest.fixture(scope="module", autouse=True)
def no_query_outlives_its_module() -> Iterator[None]:
    """Stop streaming queries a module left running: a forgotten query would go on taking one of
    the two cores from every test after it. (A module without Spark starts no session here.)"""
    yield
    spark = SparkSession.getActiveSession()
    for query in spark.streams.active if spark is not None else []:
        print(f"\nstopping query {query.name or query.id}, left running by a test module")
        query.stop()


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
        server = {**conf, "spark.hadoop.hadoop.security.credential.provider.path": store,
                  "spark.sql.warehouse.dir": "s3a://flow/warehouse"}  # managed tables: the catalog's storage
        with spark_connect_server(base / "connect.log", properties=OBJECT_STORAGE_CONF, conf=server,
                                  env=env) as (url, _pid):
            yield Governed(url, endpoint, key, secret, conf, env, base / "connect.log")


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
def cli_home(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A home with one queue, ``orders.eu`` (stop 5 / resume 2), declared by the command line."""
    from spark_flow.cli import main

    home = str(tmp_path / "home")
    queue = str(tmp_path / "queues" / "orders.eu")
    assert main(["--home", home, "declare", queue, "--schema", "id BIGINT, body STRING",
                 "--set", "stopCount=5", "resumeCount=2"]) == 0
    assert "queue 'orders.eu'" in capsys.readouterr().out
    return home


@pytest.fixture
def subs(tmp_path: Path) -> SubscriptionTable:
    """A queue ``q``'s subscriptions table, made (empty) with deltalake."""
    table = SubscriptionTable(str(tmp_path / "subscriptions"), "q")
    assert table.create_table()
    return table


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The storage a test runs on, by its parameter (``indirect``; :func:`support.stores.object_store`)."""
    return object_store(getattr(request, "param", "local"), request, tmp_path)


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
