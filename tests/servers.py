"""Servers the suite starts once and stops by process id: a Spark Connect server from the
pip-installed PySpark (the server Databricks serverless and standard access mode speak to), a
standalone Spark cluster (a master and a worker, from the same PySpark), an S3 server (moto, from
PyPI) and an Azure Blob storage server (Azurite, from npm)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from email.utils import formatdate
from pathlib import Path
from urllib.request import Request, urlopen

ROOT = Path(__file__).resolve().parent.parent
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
SPARK_CLASS = Path(sys.executable).parent / "spark-class"
MOTO_SERVER = Path(sys.executable).parent / "moto_server"
AZURITE_BLOB = ROOT / "node_modules" / ".bin" / "azurite-blob"
#: Azurite's well-known development account (public, in Microsoft's documentation).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _server(command: list[str], port: int, log: Path, what: str, timeout: float, stop_timeout: float = 30,
            **popen: object) -> Iterator[None]:
    """Run ``command`` in its own process group until the block ends; ready when ``port`` accepts.
    Stopped with SIGTERM, then SIGKILL after ``stop_timeout`` seconds."""
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                  **popen)  # type: ignore[call-overload]
    try:
        deadline = time.monotonic() + timeout
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start (exit {server.poll()}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@contextmanager
def moto_s3_server(log: Path, timeout: float = 60) -> Iterator[str]:
    """An S3 API (moto) on a loopback port, with atomic conditional writes as S3's; yields its URL."""
    port = free_port()
    with _server([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], port, log, "the moto S3 server", timeout,
                 stop_timeout=3):
        yield f"http://127.0.0.1:{port}"


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create an S3 bucket (moto takes an unsigned request)."""
    urlopen(Request(f"{endpoint}/{bucket}", method="PUT"), timeout=30).close()


@contextmanager
def signed_s3_server(log: Path, bucket: str, timeout: float = 60) -> Iterator[tuple[str, str, str]]:
    """An S3 API (moto) that refuses every request not signed with its one user's key (moto's
    IAM enforcement after the three calls that make that user), with ``bucket``; yields its URL,
    the access key id and the secret key."""
    import boto3

    port = free_port()
    with _server([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], port, log, "the signed S3 server", timeout,
                 stop_timeout=3, env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}):
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
                           aws_secret_access_key="setup")
        iam.create_user(UserName="engine")
        iam.put_user_policy(UserName="engine", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="engine")["AccessKey"]
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key["AccessKeyId"],
                     aws_secret_access_key=key["SecretAccessKey"]).create_bucket(Bucket=bucket)
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]


@contextmanager
def refusing_http_server() -> Iterator[str]:
    """An HTTP server (a thread of this process) that answers 403 to every request: instance
    metadata as a sandbox's network refuses it, so a Python without credentials learns at once
    that it has none. Yields its URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Refuse(BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PUT = _refuse

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def hadoop_credential_store(path: Path, secrets: dict[str, str]) -> str:
    """A Hadoop credential store (JCEKS) at ``path`` holding ``secrets`` (Hadoop key -> value),
    made with Hadoop's ``CredentialShell`` from the pip-installed PySpark's jars; its provider URL
    (``hadoop.security.credential.provider.path``). A JVM that is given it reads the secrets
    through ``Configuration.getPassword``; they are in no Spark conf and no environment."""
    import pyspark

    jars = str(Path(pyspark.__file__).parent / "jars" / "*")
    provider = f"jceks://file{path}"
    for key, value in secrets.items():
        subprocess.run(["java", "-cp", jars, "org.apache.hadoop.security.alias.CredentialShell", "create", key,
                        "-value", value, "-provider", provider], check=True, capture_output=True, timeout=60)
    return provider


@contextmanager
def azurite_blob_server(location: Path, log: Path, timeout: float = 60) -> Iterator[str]:
    """Azure Blob storage (Azurite) on a loopback port, its data in ``location``; yields the
    development account's blob endpoint (``http://127.0.0.1:<port>/devstoreaccount1``)."""
    port = free_port()
    command = [str(AZURITE_BLOB), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(location),
               "--skipApiVersionCheck", "--loose"]
    with _server(command, port, log, "the Azurite blob server", timeout, stop_timeout=3):
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"


def create_container(endpoint: str, container: str) -> None:
    """Create a blob container, with a request signed by the account's key (SharedKey)."""
    date, version = formatdate(usegmt=True), "2021-08-06"
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{container}\nrestype:container"
    signed = "PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n" + resource
    signature = base64.b64encode(hmac.new(base64.b64decode(AZURITE_KEY), signed.encode(), hashlib.sha256).digest())
    headers = {"x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
               "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature.decode()}"}
    urlopen(Request(f"{endpoint}/{container}?restype=container", method="PUT", headers=headers), timeout=30).close()


@contextmanager
def spark_connect_server(log: Path, timeout: float = 240, properties: Path = ROOT / "conf" / "spark-defaults.conf",
                         conf: dict[str, str] | None = None, env: dict[str, str] | None = None) -> Iterator[str]:
    """A Spark Connect server on a loopback port, with Delta and this checkout's spark_flow on its
    Python workers' path (foreachBatch functions and Python data sources run there); yields its
    ``sc://`` URL. ``properties``, ``conf`` and ``env`` add to its own."""
    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
           "SPARK_CONF_DIR": str(ROOT / "conf"), **(env or {})}  # its log4j2.properties: warnings and errors only
    extra = [part for key, value in (conf or {}).items() for part in ("--conf", f"{key}={value}")]
    command = [str(SPARK_SUBMIT), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
               "--properties-file", str(properties), *extra,
               "--conf", "spark.master=local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.databricks.delta.snapshotPartitions=1",
               "--conf", "spark.sql.streaming.stopTimeout=60s", "--conf", f"spark.pyspark.python={sys.executable}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"]
    with _server(command, port, log, "the Spark Connect server", timeout, env=env):
        yield f"sc://127.0.0.1:{port}"


def _alive_workers(ui_port: int) -> int:
    """How many workers the standalone master at ``ui_port`` has registered (its UI's JSON)."""
    try:
        with urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
            return int(json.load(response).get("aliveworkers", 0))
    except OSError:
        return 0


@contextmanager
def spark_standalone_cluster(work: Path, cores: int = 2, memory: str = "2g", timeout: float = 120) -> Iterator[str]:
    """A standalone Spark cluster on loopback ports: a master and one worker of ``cores`` cores
    and ``memory``, each its own JVM (``spark-class``), executors in JVMs of their own that run
    this interpreter's Python workers; logs and the executors' work directories under ``work``.
    Yields the master's ``spark://`` URL once the worker has registered."""
    port, ui_port, worker_port, worker_ui_port = (free_port() for _ in range(4))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_CONF_DIR": str(ROOT / "conf")}  # its log4j2.properties: warnings and errors only
    master = [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui_port)]
    worker = [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
              "--port", str(worker_port), "--webui-port", str(worker_ui_port), "--cores", str(cores),
              "--memory", memory, "--work-dir", str(work / "worker"), f"spark://127.0.0.1:{port}"]
    with (_server(master, port, work / "master.log", "the standalone master", timeout, env=env),
          _server(worker, worker_port, work / "worker.log", "the standalone worker", timeout, env=env)):
        deadline = time.monotonic() + timeout
        while not _alive_workers(ui_port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not register with the master:\n"
                                   f"{(work / 'worker.log').read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"


CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")
CHROMEDRIVER = Path(shutil.which("chromedriver") or "/usr/bin/chromedriver")
#: What headless Chromium needs as root on a closed network: no sandbox (root), no GPU, nothing
#: fetched or synced in the background.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000")


@contextmanager
def chromium(profile: Path, log: Path) -> Iterator[object]:
    """Headless Chromium driven by chromedriver (Debian's ``chromium`` and ``chromium-driver``,
    through selenium), with a fresh profile in ``profile``; yields the selenium WebDriver.
    chromedriver is stopped by its process id when the block ends, Chromium with it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: apt-get install chromium chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = Service(str(CHROMEDRIVER), log_output=str(log))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        pid = service.process.pid if service.process is not None else None
        driver.quit()
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


PROMETHEUS = Path(shutil.which("prometheus") or "/usr/bin/prometheus")
PROMTOOL = Path(shutil.which("promtool") or "/usr/bin/promtool")


@contextmanager
def prometheus_server(targets: list[str], work: Path, scrape_interval: str = "1s", rules: Path | None = None,
                      timeout: float = 60) -> Iterator[str]:
    """A Prometheus server (Debian's ``prometheus``) on a loopback port scraping ``targets``
    (``host:port``) every ``scrape_interval``, its data in ``work``; yields its URL."""
    if not PROMETHEUS.exists():
        raise RuntimeError(f"{PROMETHEUS} missing: apt-get install prometheus (.ci/run does)")
    port = free_port()
    config = work / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(rules)] if rules else [],
        "scrape_configs": [{"job_name": "spark-flow", "static_configs": [{"targets": targets}]}],
    }))  # JSON is YAML
    command = [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    with _server(command, port, work / "prometheus.log", "the Prometheus server", timeout, stop_timeout=10):
        yield f"http://127.0.0.1:{port}"
