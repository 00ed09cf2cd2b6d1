"""Servers the suite starts once and stops by process id: a Spark Connect server from the
pip-installed PySpark (the server Databricks serverless and standard access mode speak to)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def spark_connect_server(log: Path, timeout: float = 240) -> Iterator[str]:
    """A Spark Connect server on a loopback port, with Delta and this checkout's spark_flow on its
    Python workers' path (foreachBatch functions and Python data sources run there); yields its
    ``sc://`` URL."""
    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
           "SPARK_CONF_DIR": str(ROOT / "conf")}  # its log4j2.properties: warnings and errors only
    command = [str(SPARK_SUBMIT), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
               "--properties-file", str(ROOT / "conf" / "spark-defaults.conf"),
               "--conf", "spark.master=local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.databricks.delta.snapshotPartitions=1",
               "--conf", "spark.sql.streaming.stopTimeout=60s", "--conf", f"spark.pyspark.python={sys.executable}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"]
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark Connect server did not start (exit {server.poll()}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
