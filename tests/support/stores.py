"""Where a test keeps its queues, home and checkpoints: a local directory, the suite's S3 server
(moto), its Azure Blob server (Azurite) or its Google Cloud Storage server (fake-gcs-server), with the Spark conf a job needs to reach it (the
object store file systems' jars from conf/object-storage.conf, endpoint and keys) and the
deltalake storage options spark-flow derives from that conf."""

from __future__ import annotations

import posixpath
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark_flow.cli import read_properties
from spark_flow.rules.storage_options import storage_options
from support.processes import ROOT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OBJECT_STORAGE_CONF = ROOT / "conf" / "object-storage.conf"
#: Google's GCS connector as conf/object-storage.conf's GCS lines set it: its classes for
#: ``gs://``, and plain numbers for the sizes Hadoop 3.5's own defaults give as ``64m``, which the
#: connector cannot read (``NumberFormatException: For input string: "64m"``).
GCS_CONNECTOR_CONF = {
    "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
    "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
    "fs.gs.block.size": "67108864",
    "fs.gs.rewrite.max.chunk.size": "536870912",
    "fs.gs.outputstream.buffer.size": "8388608",
    "fs.gs.inputstream.inplace.seek.limit": "8388608",
    "fs.gs.inputstream.min.range.request.size": "2097152",
}
#: The S3 secret key the tests use: a string no log, table or message may contain.
S3_SECRET = "s3cr3t-Never-In-Logs-7f3a9c"


@dataclass(frozen=True)
class Store:
    """A test's storage: ``root`` (a directory or bucket/container URL unique to the test), the
    Spark conf of jobs that use it, and deltalake's storage options for reading it back."""

    kind: str
    root: str
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def options(self) -> dict[str, str]:
        return storage_options(self.conf)

    @property
    def secrets(self) -> list[str]:
        return [value for key, value in self.conf.items() if key.endswith(("secret.key", ".dfs.core.windows.net"))]

    def url(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)


def _object_storage(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` over conf/object-storage.conf, as a user's ``--properties-file`` and ``--conf``."""
    return {**read_properties(str(OBJECT_STORAGE_CONF)), **conf}


def s3_conf(endpoint: str) -> dict[str, str]:
    """A job's conf for the S3 server: S3A with path-style requests over http, fixed keys."""
    return _object_storage({
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": "spark-flow-tests",
        "spark.hadoop.fs.s3a.secret.key": S3_SECRET,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    })


def abfs_conf(endpoint: str, account: str, key: str) -> dict[str, str]:
    """A job's conf for Azurite: ABFS with SharedKey over http on its blob endpoint (Azurite has
    no hierarchical namespace, so ABFS is told to speak the Blob API)."""
    host = endpoint.split("://", 1)[1].split("/", 1)[0]
    return _object_storage({
        f"spark.hadoop.fs.azure.account.key.{account}.dfs.core.windows.net": key,
        "spark.hadoop.fs.azure.account.auth.type": "SharedKey",
        "spark.hadoop.fs.azure.abfs.endpoint": host,
        "spark.hadoop.fs.azure.always.use.https": "false",
        "spark.hadoop.fs.azure.account.hns.enabled": "false",
        "spark.hadoop.fs.azure.fns.account.service.type": "BLOB",
        "spark.hadoop.fs.azure.ingress.service.type": "BLOB",
        "spark.hadoop.fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
    })


def gcs_conf(endpoint: str, connector: str) -> dict[str, str]:
    """A job's conf for the GCS server: conf/object-storage.conf's GCS lines (Google's GCS
    connector, its shaded jar ``connector``; plain numbers where Hadoop 3.5's defaults write
    ``64m``) at the server's URL, without credentials (an emulator's), and renames as a copy and a
    delete: the connector moves an object with GCS's ``moveTo`` request, which the emulator does
    not serve (400)."""
    return _object_storage({
        "spark.jars": connector,
        **{f"spark.hadoop.{key}": value for key, value in GCS_CONNECTOR_CONF.items()},
        "spark.hadoop.fs.gs.storage.root.url": endpoint + "/",
        "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED",
        "spark.hadoop.fs.gs.project.id": "spark-flow-tests",
        "spark.hadoop.fs.gs.operation.move.enable": "false",
    })


#: The schema a test's queues and home are tables of when it runs through the engine (the ``io`` fixture).
IO_SCHEMA = "flow_io"


@dataclass(frozen=True)
class Io:
    """How a test reaches its tables (``mode``, ``spark.flow.io``) and where its queues are: paths
    under ``base`` with deltalake; tables of :data:`IO_SCHEMA`, by name, through the engine."""

    mode: str
    base: Path

    def queue(self, name: str) -> str:
        """Where the test's queue ``name`` is: a path, or a catalog name."""
        return str(self.base / name) if self.mode == "deltalake" else f"{IO_SCHEMA}.{name}"

    def table(self, spark: SparkSession, location: str) -> DataFrame:
        """The Delta table at ``location`` (a path, or a catalog name) as a DataFrame."""
        return spark.read.format("delta").load(location) if "/" in location else spark.table(location)


def object_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A test's storage of ``kind`` (the ``store`` fixture's parameter): ``local`` (the test's
    temporary directory), ``s3`` (the S3 server, ``s3a://flow/<test>``), ``abfs`` (Azurite,
    ``abfs://flow@devstoreaccount1.dfs.core.windows.net/<test>``) or ``gcs`` (the GCS server,
    ``gs://flow/<test>``); the servers are the suite's, started at their first use."""
    from support.servers import AZURITE_ACCOUNT, AZURITE_KEY

    unique = f"{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    if kind == "s3":
        return Store(kind, f"s3a://flow/{unique}", s3_conf(request.getfixturevalue("s3_server")))
    if kind == "abfs":
        conf = abfs_conf(request.getfixturevalue("azurite_server"), AZURITE_ACCOUNT, AZURITE_KEY)
        return Store(kind, f"abfs://flow@{AZURITE_ACCOUNT}.dfs.core.windows.net/{unique}", conf)
    if kind == "gcs":
        endpoint, connector, _binary = request.getfixturevalue("gcs_server")
        return Store(kind, f"gs://flow/{unique}", gcs_conf(endpoint, connector))
    return Store(kind, str(tmp_path))
