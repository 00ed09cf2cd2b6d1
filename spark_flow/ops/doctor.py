"""``spark-flow doctor``: a deployment checked the way spark-flow will use it, one line per check.

spark-flow reaches storage three ways, and a deployment can give each different things: Spark's
engine (Delta and the object store's jars, its JVM's credentials), ``deltalake`` in the driver's
Python, and ``deltalake`` in the executors' Python workers (the ``flowqueue`` source's reads,
foreachBatch functions under Spark Connect). Which store the driver uses, ``deltalake`` or the
engine (``spark.flow.io``, docs/design.md 2.10), is said first, and why; in engine mode the
driver's tables are tried through the engine and the executors' deltalake is not needed. Each
is tried for real under the home: a one-row Delta table written and read back, then removed (in
engine mode, where this Python may not reach the storage, what it cannot remove stays); a
failure names what is missing and where to give it. Then the home's tables and the queues named
are read.
"""

from __future__ import annotations

import contextlib
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import SparkFlowError, StorageAccessError, one_line
from spark_flow.flow.queue import open_queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.home import control_path
from spark_flow.rules.names import is_path, queue_ref, state_member
from spark_flow.spark.declare import queue_location
from spark_flow.spark.session import session_storage_options
from spark_flow.store.access import namenode_error, remove_location
from spark_flow.store.engine import load, save
from spark_flow.store.io import chosen_mode, uses_engine
from spark_flow.store.table import write_and_read as probe_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: What Spark's errors name when a jar is missing (a class, a scheme), and the jar that adds it.
_MISSING_JARS = (
    (("S3AFileSystem", 'scheme "s3a"'), "org.apache.hadoop:hadoop-aws:3.5.0 and the AWS SDK v2 modules s3, "
     "s3-transfer-manager and sts 2.35.4 in spark.jars.packages (conf/object-storage.conf), or the cluster's own S3 "
     "connector"),
    (("AzureBlobFileSystem", 'scheme "abfs'), "org.apache.hadoop:hadoop-azure:3.5.0 in spark.jars.packages "
     "(conf/object-storage.conf)"),
    (("GoogleHadoopFileSystem", 'scheme "gs"'), "Google's gcs-connector (hadoop3, shaded) in spark.jars"),
    (("DATA_SOURCE_NOT_FOUND", "io.delta", "DeltaSparkSessionExtension"), "io.delta:delta-spark_4.2_2.13:4.4.0 in "
     "spark.jars.packages, with Delta's spark.sql.extensions and spark.sql.catalog.spark_catalog "
     "(conf/spark-defaults.conf)"),
)


#: The driver's check, by the store it uses (:mod:`spark_flow.store.io`).
DRIVER, DRIVER_ENGINE = "driver's deltalake", "driver through the engine"
#: The executors' deltalake check in engine mode.
EXECUTORS_IN_ENGINE_MODE = ("not needed in engine mode: no executor's Python reads a table itself (foreachBatch "
                            "functions use their batch's session, consumers Delta's own source)")


@dataclass(frozen=True)
class Check:
    """One check's result: what was checked, what was seen, and what to do when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return text if self.ok or not self.fix else f"{text} -> {self.fix}"


def _said(error: BaseException) -> str:
    """An error's message without the JVM's stack frames and causes (``at ...``, ``Caused by``),
    as one line."""
    said = str(error).split("\nCaused by:", 1)[0]
    kept = [line for line in said.splitlines() if not re.match(r"\s*(at |\.\.\. \d+ more)", line)]
    return one_line(Exception("\n".join(kept)))[:400]


def _check(name: str, attempt: Callable[[], str], fix: Callable[[BaseException], str]) -> Check:
    try:
        return Check(name, True, attempt())
    except StorageAccessError as error:
        return Check(name, False, error.missing, error.fix)
    except Exception as error:  # each check reports its own failure, the others still run
        return Check(name, False, _said(error), fix(error))


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def versions(spark: SparkSession) -> str:
    """The versions spark-flow runs with; raises when the client's PySpark is not the engine's
    Spark (major.minor), or delta-spark's Python package is not the one built for it."""
    import pyspark

    engine, client, delta = spark.version, pyspark.__version__, _version("delta-spark")
    seen = (f"Python {sys.version.split()[0]}, PySpark {client}, Spark {engine}, delta-spark {delta}, "
            f"deltalake {_version('deltalake')}, pyarrow {_version('pyarrow')}, spark-flow {_version('spark-flow')}")
    if engine.split(".")[:2] != client.split(".")[:2]:
        raise RuntimeError(f"PySpark {client} with Spark {engine}: {seen}")
    return seen


def _engine_fix(location: str, error: BaseException) -> str:
    """What to do when Spark could not write Delta at ``location``: the namenode an ``hdfs://``
    URL names, when it did not answer; else :func:`_jar_fix`."""
    namenode = namenode_error(location, str(error))
    return f"{namenode.missing}: {namenode.fix}" if namenode else _jar_fix(error)


def _jar_fix(error: BaseException) -> str:
    text = _said(error)
    for names, jar in _MISSING_JARS:
        if any(name in text for name in names):
            return f"add {jar}"
    if "403" in text or "AccessDenied" in text or "credential" in text.lower():
        return "give Spark credentials for the storage (spark.hadoop.fs.s3a.*, fs.azure.account.key.*, or the cluster's)"
    return "check the storage settings Spark is given (spark.hadoop.fs.*: endpoint, credentials)"


def _storage_fix(error: BaseException) -> str:
    return "check the storage options (spark.flow.storage.*, spark.hadoop.fs.*)"


def write_and_read(location: str, options: Mapping[str, str]) -> str:
    """Write a one-row Delta table at ``location`` with the store and read it back; a failure
    to reach the storage raises :class:`StorageAccessError`, naming what is missing."""
    return f"wrote and read {location} ({probe_table(location, options)} row)"


def _executor_probe(location: str, options: dict[str, str], storage: bool) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function a one-task Spark job runs in an executor's Python worker: spark_flow's
    version there, then the same write and read as the driver's deltalake (if ``storage``)."""
    def probe(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for _ in batches:
            pass
        import spark_flow.ops.doctor  # the worker's own installation, not the driver's

        check = _check("executors' deltalake", lambda: spark_flow.ops.doctor.write_and_read(location, options),
                       _storage_fix) if storage else Check("executors' deltalake", True, EXECUTORS_IN_ENGINE_MODE)
        yield pa.RecordBatch.from_pylist([{"spark_flow": _version("spark-flow"), "python": sys.version.split()[0],
                                           "ok": check.ok, "detail": check.detail, "fix": check.fix}])
    return probe


def run_checks(spark: SparkSession, home: str, queues: Sequence[str] = ()) -> Iterator[Check]:
    """Every check, in order, against ``home`` (probe tables go under its ``_spark_flow/doctor``
    and are removed, whatever ends the run), then each of ``queues`` (a registered name or a path)."""
    options = session_storage_options(spark)
    probe = control_path(home, f"doctor/{uuid.uuid4().hex[:12]}")
    writes: list[Check] = []  # the checks that write a probe table: none passed, nothing to remove
    engine = uses_engine(home, options)  # then this Python may not reach the storage: the probe tables stay
    try:
        yield _check("versions", lambda: versions(spark), lambda e: "install the PySpark of the engine's Spark "
                     "version (pip install 'pyspark[connect]==<Spark's version>') and delta-spark built for it")
        yield _check("store", lambda: chosen_mode(home, options), lambda e: "set spark.flow.io (deltalake, engine)")
        for check in _probes(spark, probe, options, engine=engine):
            writes.append(check)
            yield check
        reached = next(check for check in writes if check.name in (DRIVER, DRIVER_ENGINE))
        if reached.ok:
            admin = FlowAdmin(home, options)
            yield _check("home", lambda: _home(admin), lambda e: "declare a queue with spark.flow.home set, or check "
                         "the home")
            for queue in queues:
                yield _check(f"queue {queue}", lambda q=queue: _queue(spark, admin, q),  # type: ignore[misc]
                             lambda e: "declare it (spark-flow declare), or name a registered queue or a queue's path")
        else:
            yield Check("home", False, f"not read: the {reached.name} cannot reach it", "fix the check above first")
    finally:
        if any(check.ok for check in writes if check.name != "executors' Python"):
            _remove(spark, probe, options, engine=engine)


def _probes(spark: SparkSession, probe: str, options: dict[str, str], *, engine: bool) -> Iterator[Check]:
    """A Delta table written under ``probe`` by Spark, by the driver's store (deltalake, or the
    engine), then by an executor's deltalake (after its Python's check; not in ``engine`` mode)."""
    spark_table = state_member(probe, "engine")

    def spark_delta() -> str:
        save(spark.range(1).write.format("delta"), spark_table)
        rows = load(spark.read.format("delta"), spark_table).count()
        return f"Spark wrote and read Delta at {spark_table} ({rows} row)"
    yield _check("Spark's Delta and storage jars", spark_delta, lambda e: _engine_fix(spark_table, e))
    driver = state_member(probe, "driver")
    yield _check(DRIVER_ENGINE if engine else DRIVER, lambda: write_and_read(driver, options),
                 (lambda e: _engine_fix(driver, e)) if engine else _storage_fix)
    yield from _executors(spark, state_member(probe, "executor"), options, storage=not engine)


def _executors(spark: SparkSession, location: str, options: dict[str, str], *, storage: bool) -> Iterator[Check]:
    """spark_flow importable in an executor's Python worker, and its deltalake reaching the home
    (unless not ``storage``: in engine mode no executor's Python reads a table itself)."""
    schema = "spark_flow string, python string, ok boolean, detail string, fix string"
    python = spark.conf.get("spark.pyspark.python", None) or "python3 on the executors' PATH"
    try:
        [row] = spark.range(1, numPartitions=1).mapInArrow(_executor_probe(location, options, storage),
                                                           schema).collect()
    except Exception as error:
        yield executors_failed(str(error), python)
        yield Check("executors' deltalake", False, "not run: no executor's Python ran spark_flow", "fix the check above first")
        return
    yield Check("executors' Python", True, f"spark_flow {row['spark_flow']} importable (Python {row['python']})")
    yield Check("executors' deltalake", bool(row["ok"]), row["detail"][:400], row["fix"])


def executors_failed(text: str, python: str) -> Check:
    """The executors' Python failing the probe (``text``: the whole error, Spark's and the
    Python worker's traceback): the module it lacks, looked for in the whole text (a YARN
    container's paths make the traceback long), and the fix; else the error itself."""
    missing = re.findall(r"No module named '([\w.]+)'", text)
    if not missing:
        return Check("executors' Python", False, _said(Exception(text)), "see the executors' logs")
    return Check("executors' Python", False, f"No module named '{missing[-1]}' in the executors' Python ({python})",
                 "install spark-flow (with deltalake and pyarrow) in that Python on every node, or name one that has "
                 "it with spark.pyspark.python (on YARN a path on every node; on Databricks %pip install spark-flow "
                 "or a cluster library)")


def _home(admin: FlowAdmin) -> str:
    queues = admin.queues()
    status, commands = admin.status(), admin.commands.read()
    return (f"{admin.home}: {len(queues)} queue(s) registered, {len(status)} status row(s), "
            f"{len(commands)} operator command(s)")


def _queue(spark: SparkSession, admin: FlowAdmin, name: str) -> str:
    handle = open_queue(queue_location(spark, name), admin.storage_options) if queue_ref(name).path else admin.queue(name)
    depths = handle.depths()
    shown = ", ".join(f"{sub} {depth.count}" for sub, depth in sorted(depths.items()))
    return f"{handle.path}: depth by subscription {shown or '(none)'}"


def _remove(spark: SparkSession, probe: str, options: Mapping[str, str], *, engine: bool) -> None:
    """Remove the probe tables: dropped, when they are catalog tables; else their folder, where
    this Python reaches it (through the engine it may not: Spark SQL removes no folder, and the
    probes stay)."""
    if not is_path(probe):
        for table in ("engine", "driver"):
            with contextlib.suppress(Exception):
                spark.sql(f"DROP TABLE IF EXISTS {state_member(probe, table)}")
    elif not engine:
        with contextlib.suppress(OSError, SparkFlowError):
            remove_location(probe, options)


def report(checks: Iterator[Check], out: Callable[[str], None] = print) -> int:
    """Print each check's line as it comes; 0 when every check passed, 1 otherwise."""
    failed = total = 0
    for check in checks:
        out(check.line())
        total += 1
        failed += not check.ok
    out(f"{total - failed} of {total} checks passed")
    return 1 if failed else 0
