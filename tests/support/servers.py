"""Servers the suite starts once and stops by process id: a Spark Connect server from the
pip-installed PySpark (the server Databricks serverless and standard access mode speak to), a
standalone Spark cluster (a master and a worker, from the same PySpark), an S3 server (moto, from
PyPI), an Azure Blob storage server (Azurite, from npm), a Google Cloud Storage server
(fake-gcs-server, a Go module, built from ``tests/gcs``) and HDFS with YARN (Hadoop's mini
cluster, from Maven Central)."""

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import Request, urlopen

ROOT = Path(__file__).resolve().parents[2]
#: Google's GCS connector for Hadoop 3 (the newest release with a shaded jar on Maven Central).
GCS_CONNECTOR_VERSION = "3.0.19"
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


def _answers(url: str) -> bool:
    """True if ``url`` answers 200."""
    try:
        with urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:  # refused, or an HTTP error (URLError and HTTPError are OSErrors)
        return False


@contextmanager
def _server(command: list[str], port: int, log: Path, what: str, timeout: float, stop_timeout: float = 30,
            cwd: Path = ROOT, ready: Callable[[], bool] = lambda: True, **popen: object) -> Iterator[int]:
    """Run ``command`` in its own process group until the block ends; ready when ``port`` accepts
    and ``ready()``; yields its process id. Stopped with SIGTERM, then SIGKILL after
    ``stop_timeout`` seconds."""
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                  **popen)  # type: ignore[call-overload]
    try:
        deadline = time.monotonic() + timeout
        while not (_listening(port) and ready()):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start (exit {server.poll()}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield server.pid
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


GCS_SERVER = ROOT / "tests" / "gcs"


def build_gcs_server() -> Path:
    """The suite's GCS server (``tests/gcs``: fake-gcs-server plus the XML API requests deltalake
    sends), built with ``go`` where it is missing or older than its sources (``make test`` builds
    it first: 10 s with the Go module cache filled, a few minutes on a fresh machine)."""
    binary = GCS_SERVER / "gcs-server"
    sources = max((GCS_SERVER / name).stat().st_mtime for name in ("main.go", "go.mod", "go.sum"))
    if not binary.exists() or binary.stat().st_mtime < sources:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        built = subprocess.run([go, "build", "-o", binary.name, "."], cwd=GCS_SERVER,
                               capture_output=True, text=True, timeout=900, check=False)
        if built.returncode != 0:
            raise RuntimeError(f"building the GCS server failed (Go 1.26 is needed):\n{built.stderr[-3000:]}")
    return binary


@contextmanager
def gcs_server(binary: Path, bucket: str, log: Path, as_is: bool = False, timeout: float = 60) -> Iterator[str]:
    """Google Cloud Storage (the suite's fake-gcs-server, in memory) on a loopback port with
    ``bucket``; yields its URL. ``as_is``: fake-gcs-server without the requests ``tests/gcs`` adds."""
    port = free_port()
    command = [str(binary), "-host", "127.0.0.1", "-port", str(port), "-bucket", bucket, *(["-as-is"] if as_is else [])]
    with _server(command, port, log, "the GCS server", timeout, stop_timeout=3):
        yield f"http://127.0.0.1:{port}"


def gcs_connector(cache: Path, version: str = GCS_CONNECTOR_VERSION) -> Path:
    """Google's GCS connector for Hadoop, its shaded jar, from Maven Central with ``mvn`` (kept
    in ``~/.m2``; Spark's ``spark.jars.packages`` takes no classifier)."""
    jar = Path.home() / ".m2" / "repository" / "com" / "google" / "cloud" / "bigdataoss" / "gcs-connector" / version
    jar = jar / f"gcs-connector-{version}-shaded.jar"
    if not jar.exists():
        mvn = shutil.which("mvn") or "mvn"
        got = subprocess.run([mvn, "-q", "dependency:get", f"-Dartifact=com.google.cloud.bigdataoss:gcs-connector:"
                              f"{version}:jar:shaded", "-Dtransitive=false"], cwd=cache, capture_output=True,
                             text=True, timeout=600, check=False)
        if got.returncode != 0 or not jar.exists():
            raise RuntimeError(f"fetching the GCS connector failed (mvn is needed):\n{got.stdout[-3000:]}")
    return jar


@contextmanager
def spark_connect_server(log: Path, timeout: float = 240, properties: Path = ROOT / "conf" / "spark-defaults.conf",
                         conf: dict[str, str] | None = None,
                         env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """A Spark Connect server on a loopback port, with Delta and this checkout's spark_flow on its
    Python workers' path (foreachBatch functions and Python data sources run there); yields its
    ``sc://`` URL and its JVM's process id (spark-submit execs the JVM). ``properties``, ``conf``
    and ``env`` add to its own. It runs the engine's work of the suite's Connect clients for as
    long as the suite: like the suite's session, it keeps both compilers (``support.jvm.JIT`` is
    for the JVMs that live seconds)."""
    from support.jvm import JIT

    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
           "SPARK_CONF_DIR": str(ROOT / "conf"), **(env or {})}  # its log4j2.properties: warnings and errors only
    if "JDK_JAVA_OPTIONS" in env:
        env["JDK_JAVA_OPTIONS"] = env["JDK_JAVA_OPTIONS"].replace(JIT, "").strip()
    extra = [part for key, value in (conf or {}).items() for part in ("--conf", f"{key}={value}")]
    command = [str(SPARK_SUBMIT), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
               "--properties-file", str(properties), *extra,
               "--conf", "spark.master=local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.databricks.delta.snapshotPartitions=1",
               "--conf", "spark.sql.streaming.stopTimeout=60s", "--conf", f"spark.pyspark.python={sys.executable}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"]
    with _server(command, port, log, "the Spark Connect server", timeout, env=env) as pid:
        yield f"sc://127.0.0.1:{port}", pid


def stream_threads(pid: int) -> str:
    """The stacks of the streaming queries' threads of the JVM ``pid`` (``jstack``): where each
    query waits, for the report of a test that saw one stop making progress."""
    dump = subprocess.run(["jstack", str(pid)], capture_output=True, text=True, timeout=60, check=False).stdout
    threads = dump.split("\n\n")
    return "\n\n".join(t for t in threads if "stream execution thread" in t or "foreachBatch" in t.lower())


def master_state(ui_port: int) -> dict[str, Any]:
    """What the standalone master at ``ui_port`` shows on its UI's JSON (``aliveworkers``,
    ``activeapps``, ...); empty while its UI is not up."""
    try:
        with urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
            return dict(json.load(response))
    except (OSError, ValueError):  # not listening yet, or answering before its page is ready
        return {}


@contextmanager
def spark_standalone_master(work: Path, timeout: float = 120) -> Iterator[tuple[str, int, dict[str, str]]]:
    """A standalone Spark master on loopback ports, with no worker: a cluster with no room for
    an application's executors until one registers. Yields its ``spark://`` URL, its UI's port
    and the environment its JVMs run with; its log under ``work``."""
    port, ui_port = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_CONF_DIR": str(ROOT / "conf")}  # its log4j2.properties: warnings and errors only
    master = [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui_port)]
    with _server(master, port, work / "master.log", "the standalone master", timeout, env=env):
        yield f"spark://127.0.0.1:{port}", ui_port, env


@contextmanager
def spark_standalone_cluster(work: Path, cores: int = 2, memory: str = "2g", timeout: float = 120) -> Iterator[str]:
    """A standalone Spark cluster on loopback ports: a master and one worker of ``cores`` cores
    and ``memory``, each its own JVM (``spark-class``), executors in JVMs of their own that run
    this interpreter's Python workers; logs and the executors' work directories under ``work``.
    Yields the master's ``spark://`` URL once the worker has registered."""
    worker_port, worker_ui_port = free_port(), free_port()
    with spark_standalone_master(work, timeout) as (url, ui_port, env):
        worker = [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                  "--port", str(worker_port), "--webui-port", str(worker_ui_port), "--cores", str(cores),
                  "--memory", memory, "--work-dir", str(work / "worker"), url]
        with _server(worker, worker_port, work / "worker.log", "the standalone worker", timeout, env=env):
            deadline = time.monotonic() + timeout
            while not master_state(ui_port).get("aliveworkers"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker did not register with the master:\n"
                                       f"{(work / 'worker.log').read_text(errors='replace')[-3000:]}")
                time.sleep(0.5)
            yield url


#: Hadoop's mini cluster (HDFS and YARN in one process) of Spark 4.2's Hadoop, and what it calls
#: without bringing it: the JUnit 5 API (its HDFS part) and Bouncy Castle (the resource manager).
MINICLUSTER_PACKAGES = ("org.apache.hadoop:hadoop-client-minicluster:3.5.0", "org.junit.jupiter:junit-jupiter-api:5.10.2",
                        "org.bouncycastle:bcprov-jdk18on:1.78.1", "org.bouncycastle:bcpkix-jdk18on:1.78.1")
HADOOP = ROOT / "tests" / "hadoop"


def minicluster_classpath(cache: Path) -> list[str]:
    """The mini cluster's jars, fetched once by Spark's own package resolution (Maven Central,
    Spark's ivy cache) without the Hadoop client jars PySpark ships; the list kept in ``cache``."""
    listing = cache / f"minicluster-{hashlib.sha256(' '.join(MINICLUSTER_PACKAGES).encode()).hexdigest()[:12]}.classpath"  # a new list for new packages
    if listing.exists() and all(Path(jar).exists() for jar in listing.read_text().split()):
        return listing.read_text().split()
    excludes = "org.apache.hadoop:hadoop-client-api,org.apache.hadoop:hadoop-client-runtime,org.xerial.snappy:snappy-java"
    result = subprocess.run([str(SPARK_SUBMIT), "--conf", f"spark.jars.packages={','.join(MINICLUSTER_PACKAGES)}",
                             "--conf", f"spark.jars.excludes={excludes}", str(HADOOP / "classpath.py")],
                            capture_output=True, text=True, timeout=600, check=False)
    found = [line.split("=", 1)[1] for line in result.stdout.splitlines() if line.startswith("spark.jars=")]
    if result.returncode != 0 or not found or not found[0]:
        raise RuntimeError(f"resolving {MINICLUSTER_PACKAGES} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    jars = [urlparse(jar).path for jar in found[0].split(",")]
    listing.write_text("\n".join(jars))
    return jars


def java_home() -> Path:
    """The JDK of the ``java`` on PATH (YARN starts its containers' JVMs with ``$JAVA_HOME``)."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("Java 17 is needed (apt-get install openjdk-17-jdk-headless)")
    return Path(java).resolve().parent.parent


@contextmanager
def hadoop_mini_cluster(work: Path, cache: Path, memory_mb: int = 8192, vcores: int = 8,
                        timeout: float = 120) -> Iterator[tuple[str, Path]]:
    """HDFS (a namenode and a datanode) and YARN (a resource manager and a node manager) in one
    JVM on loopback ports: Hadoop's mini cluster from Maven Central, started by
    ``tests/hadoop/MiniHadoop.java`` (compiled once into ``cache``), its data under ``work``.
    Yields the namenode's ``hdfs://`` URL and the directory of the cluster's ``core-site.xml``,
    ``hdfs-site.xml`` and ``yarn-site.xml`` (spark-submit's ``HADOOP_CONF_DIR``)."""
    import pyspark

    jars = [*minicluster_classpath(cache), str(Path(pyspark.__file__).parent / "jars" / "*")]
    classes = cache / "classes"
    source = HADOOP / "MiniHadoop.java"
    if not (classes / "MiniHadoop.class").exists() or (classes / "MiniHadoop.class").stat().st_mtime < source.stat().st_mtime:
        javac = shutil.which("javac")
        if javac is None:
            raise RuntimeError("javac is needed for the suite's Hadoop mini cluster (apt-get install openjdk-17-jdk-headless; "
                               ".ci/run does)")
        compiled = subprocess.run([javac, "-nowarn", "-cp", os.pathsep.join(jars), "-d", str(classes), str(source)],
                                  capture_output=True, text=True, timeout=300, check=False)
        if compiled.returncode != 0:
            raise RuntimeError(f"compiling {source} failed:\n{compiled.stderr[-3000:]}")
    port, conf_dir, log = free_port(), work / "conf", work / "cluster.log"
    env = {**os.environ, "JAVA_HOME": str(java_home())}
    command = ["java", "-Xmx1g", "-cp", os.pathsep.join([str(classes), *jars]), "MiniHadoop", str(conf_dir), str(port),
               str(memory_mb), str(vcores)]
    # Killed 3 s after SIGTERM: its shutdown hook starts stopping YARN (the node manager ends
    # its containers), whose whole stop takes 17 s here; nothing of the cluster is kept.
    with _server(command, port, log, "the Hadoop mini cluster", timeout, stop_timeout=3, env=env, cwd=work,
                 ready=lambda: "ready " in log.read_text(errors="replace")):  # HDFS, then YARN
        yield f"hdfs://127.0.0.1:{port}", conf_dir


def yarn_applications(conf_dir: Path) -> list[dict[str, object]]:
    """The applications the mini cluster's resource manager knows (its REST API: name, state,
    finalStatus, startedTime, ...), found through the cluster's yarn-site.xml."""
    import xml.etree.ElementTree as ElementTree

    properties = ElementTree.parse(conf_dir / "yarn-site.xml").getroot().iter("property")
    conf = {prop.findtext("name"): prop.findtext("value") for prop in properties}
    with urlopen(f"http://{conf['yarn.resourcemanager.webapp.address']}/ws/v1/cluster/apps", timeout=30) as response:
        return list((json.load(response).get("apps") or {}).get("app", []))


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
    url = f"http://127.0.0.1:{port}"
    with _server(command, port, work / "prometheus.log", "the Prometheus server", timeout, stop_timeout=10,
                 ready=lambda: _answers(f"{url}/-/ready")):  # it listens before it answers (503 until then)
        yield url


@dataclass(frozen=True)
class Governed:
    """A Spark Connect server whose engine alone holds the storage's credentials: its ``url``,
    the S3 ``endpoint`` (bucket ``flow``), the engine's ``key`` and ``secret`` (for the test's
    own checks), the object store conf without them (what a client or the CLI is given), the
    environment its Python and a client's run with (instance metadata refusing) and its log."""

    url: str
    endpoint: str
    key: str
    secret: str
    conf: dict[str, str]
    env: dict[str, str]
    log: Path
