"""``spark-flow doctor`` on a good deployment (the line of docs/deployment.md, its output as the page
shows it) and on each broken one the suite can make: an engine without the S3 jars, a wrong endpoint,
executors without credentials (the governed server, its client holding keys the server's
Python workers lack), an ``hdfs://`` home whose namenode does not answer. Each failing line names
what to do; the exit status is 1. Executors whose Python lacks spark_flow: tests/processes/test_yarn.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyarrow.fs import FileSelector, FileType
from pyspark.sql import SparkSession
from support.docs import BIN, bash_blocks, text_blocks
from support.processes import ROOT, failure
from support.servers import Governed, free_port
from support.stores import s3_conf

from spark_flow.ops.doctor import Check, run_checks
from spark_flow.rules.storage_options import storage_options
from spark_flow.spark.session import with_conf
from spark_flow.store.access import file_system

pytestmark = pytest.mark.processes


def _lines(text: str) -> list[tuple[str, str]]:
    """Each check line's status and check name."""
    return [(match.group(1), match.group(2)) for line in text.splitlines()
            if (match := re.match(r"(ok|FAIL)\s+([^:]+):", line))]


def test_doctor_on_a_good_deployment_as_the_docs_show(s3_server: str, tmp_path: Path) -> None:
    """The deployment page's line against the S3 server, with a properties file holding its
    settings: every check passes, in the page's order, and the probe tables are gone after."""
    [line] = bash_blocks("docs/deployment.md", "Doctor")[0]
    home = f"s3a://flow/{tmp_path.name}/home"
    (tmp_path / "my-s3.conf").write_text("".join(f"{k} {v}\n" for k, v in s3_conf(s3_server).items()))
    words = [word.replace("s3a://flow/home", home).replace("my-s3.conf", str(tmp_path / "my-s3.conf")) for word in line]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run([str(BIN / words[0]), *words[1:]], capture_output=True, text=True, timeout=300, env=env,
                            cwd=ROOT)
    assert result.returncode == 0, failure(result)
    sample = text_blocks("docs/deployment.md", "Doctor")[0]
    assert _lines(result.stdout) == _lines(sample) and len(_lines(sample)) == 7, failure(result)
    assert "ok    store: deltalake (spark.flow.io=auto: this Python reaches the storage)" in result.stdout
    assert result.stdout.splitlines()[-1] == "7 of 7 checks passed"
    files, path = file_system(f"{home}/_spark_flow/doctor", storage_options(s3_conf(s3_server)))
    left = files.get_file_info(FileSelector(path, recursive=True))
    assert [info.path for info in left if info.type == FileType.File] == []  # the probe tables removed


@pytest.fixture
def on_s3(spark: SparkSession, s3_server: str) -> Iterator[dict[str, str]]:
    """The suite's session (Delta, no S3 jars) with deltalake's options for the S3 server set as
    ``spark.flow.storage.*``: the driver's and executors' deltalake reach it, Spark cannot."""
    options = {"aws_endpoint_url": s3_server, "aws_allow_http": "true", "aws_region": "us-east-1",
               "aws_access_key_id": "spark-flow-tests", "aws_secret_access_key": "s3cr3t",
               "aws_virtual_hosted_style_request": "false"}
    yield options
    for key in options:
        spark.conf.unset(f"spark.flow.storage.{key}")


def _run(spark: SparkSession, options: dict[str, str], home: str, *queues: str) -> dict[str, Check]:
    for key, value in options.items():
        spark.conf.set(f"spark.flow.storage.{key}", value)
    return {check.name: check for check in run_checks(spark, home, queues)}


@pytest.mark.parametrize("broken", ["missing jar", "wrong endpoint"])
def test_doctor_names_what_to_do(spark: SparkSession, on_s3: dict[str, str], tmp_path: Path, broken: str) -> None:
    """A session without hadoop-aws: the engine's line says which jar to add, the rest passes (a
    queue not registered fails, naming what is). A wrong endpoint, with ``spark.flow.io=deltalake``
    (auto would take the engine where deltalake does not reach): every deltalake line says which
    setting to check."""
    home = f"s3a://flow/{tmp_path.name}/home"
    io = {"spark.flow.io": "auto" if broken == "missing jar" else "deltalake"}
    if broken == "wrong endpoint":
        on_s3.update(aws_endpoint_url=f"http://127.0.0.1:{free_port()}", max_retries="1")  # refused at once
    with with_conf(spark, io):
        checks = _run(spark, on_s3, home, "events")
    print("\n".join(check.line() for check in checks.values()))
    engine = checks["Spark's Delta and storage jars"]
    assert not engine.ok and "ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem not found" in engine.detail
    assert engine.fix.startswith("add org.apache.hadoop:hadoop-aws:3.5.0")
    assert checks["versions"].ok and checks["executors' Python"].ok
    assert checks["store"].detail == {"missing jar": "deltalake (spark.flow.io=auto: this Python reaches the storage)",
                                      "wrong endpoint": "deltalake (spark.flow.io=deltalake)"}[broken]
    if broken == "missing jar":
        assert checks["driver's deltalake"].ok and checks["executors' deltalake"].ok and checks["home"].ok
        assert not checks["queue events"].ok and "not registered" in checks["queue events"].detail
        return
    for name in ("driver's deltalake", "executors' deltalake"):
        assert not checks[name].ok and checks[name].detail.startswith("deltalake cannot connect to http://127.0.0.1:")
        assert checks[name].fix == ("check spark.hadoop.fs.s3a.endpoint (or spark.flow.storage.aws_endpoint_url), "
                                    "and that this machine reaches it")
    assert not checks["home"].ok and "queue events" not in checks


def test_doctor_names_the_namenode_it_tried(spark: SparkSession) -> None:
    """An ``hdfs://`` home on a port no namenode listens on, with ``spark.flow.io=deltalake``:
    Spark's line and both deltalake lines name the address tried and that the URL gave it, not
    storage settings (which do not set it on hdfs://); nothing was written, so nothing is left to
    remove."""
    address = f"127.0.0.1:{free_port()}"
    once = {"ipc.client.connect.max.retries": "0", "spark.flow.io": "deltalake"}  # Hadoop's client tries once, not for 10 s
    with with_conf(spark, once):
        checks = {check.name: check for check in run_checks(spark, f"hdfs://{address}/flow/home")}
    print("\n".join(check.line() for check in checks.values()))
    for name in ("Spark's Delta and storage jars", "driver's deltalake", "executors' deltalake"):
        line = checks[name].line()
        assert line.startswith("FAIL") and f"the namenode at {address} (the location's hdfs:// URL names it)" in line
        assert "spark.flow.storage" not in checks[name].fix and "spark.hadoop.fs" not in checks[name].fix
    assert checks["versions"].ok and checks["executors' Python"].ok and not checks["home"].ok


def test_doctor_on_governed_compute_executors_without_credentials(governed_connect: Governed) -> None:
    """A Connect client whose own Python has the keys (its environment) on the governed server,
    whose Python workers have none, with ``spark.flow.io=auto`` (with a remote the CLI's default
    is the engine): the driver takes deltalake, which reaches the storage here; the engine and
    the driver pass, the executors' deltalake fails naming ``spark.flow.storage.*``."""
    env = {**os.environ, **governed_connect.env, "SPARK_REMOTE": f"{governed_connect.url}/;session_id={uuid.uuid4()}",
           "AWS_ACCESS_KEY_ID": governed_connect.key, "AWS_SECRET_ACCESS_KEY": governed_connect.secret}
    result = subprocess.run([str(BIN / "spark-flow"), "--home", "s3a://flow/doctor/home", "doctor", "--conf",
                             "spark.flow.io=auto"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    print(result.stdout)
    assert result.returncode == 1, failure(result)
    assert "ok    store: deltalake (spark.flow.io=auto: this Python reaches the storage)" in result.stdout
    assert _lines(result.stdout) == [("ok", "versions"), ("ok", "store"), ("ok", "Spark's Delta and storage jars"),
                                     ("ok", "driver's deltalake"), ("ok", "executors' Python"),
                                     ("FAIL", "executors' deltalake"), ("ok", "home")], failure(result)
    [line] = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert "deltalake has no S3 credentials here" in line and "-> give them as spark.flow.storage.aws_access_key_id" in line
    assert governed_connect.secret not in result.stdout + result.stderr
