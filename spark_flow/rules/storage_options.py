"""Storage options for ``deltalake``, derived from the Spark conf a user already sets.

Spark reaches object storage through Hadoop's file systems (``spark.hadoop.fs.s3a.*``,
``spark.hadoop.fs.azure.*``, ``spark.hadoop.fs.gs.*``); spark-flow's state tables, ledger and ``flowqueue`` source reach
it through ``deltalake``, which takes its endpoint and credentials as storage options. So they
are derived here, once, from the same conf, and ``spark.flow.storage.<deltalake key>`` sets
any option explicitly (it wins). The options are passed to every ``deltalake`` call: to Python
workers in the source's options, to the CLI from a properties file or ``--storage-option``.
A message shows a secret's value only as ``***`` (:func:`secret_shown`). What a process lacks
when they do not reach storage is named by :mod:`spark_flow.store.access`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from spark_flow.exceptions import ConfigurationError
from spark_flow.rules.units import parse_bool, parse_choice

STORAGE_PREFIX = "spark.flow.storage."
#: How a process reaches the tables (docs/design.md 2.10), carried with its storage options (the
#: same key in both): ``deltalake`` in its own Python, the ``engine`` (its SparkSession), or
#: ``auto``, deltalake where this Python reaches the storage and the engine otherwise.
IO_OPTION = "spark.flow.io"
IO_MODES: tuple[str, ...] = ("auto", "deltalake", "engine")
HADOOP_PREFIX = "spark.hadoop."
#: How many looks a removal takes at most: a marker blob, then its directory, which a writer may
#: change under the walk.
_WALKS = 10
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_SECRET = re.compile(r"secret|key|token|password|sas|signature|credential", re.I)

# Hadoop S3A settings and the deltalake (object_store) options they become.
_S3A = {
    "fs.s3a.access.key": "aws_access_key_id",
    "fs.s3a.secret.key": "aws_secret_access_key",
    "fs.s3a.session.token": "aws_session_token",
    "fs.s3a.endpoint.region": "aws_region",
}
_AZURE_KEY = re.compile(r"^fs\.azure\.account\.key\.([^.]+)\.(?:dfs|blob)\.core\.windows\.net$")


# Google's GCS connector (3.x) settings: a service account's key file, and the authentication type
# that takes it.
_GS_KEYFILE = "fs.gs.auth.service.account.json.keyfile"
_GS_AUTH = "fs.gs.auth.type"


def _hadoop(conf: Mapping[str, str]) -> dict[str, str]:
    """The Hadoop settings of a Spark conf (``spark.hadoop.fs.*``), by their Hadoop key; a key
    given without the prefix (a Hadoop core-site entry) counts too, the prefixed one wins."""
    found = {key: value for key, value in conf.items() if key.startswith("fs.")}
    found.update({key[len(HADOOP_PREFIX):]: value for key, value in conf.items() if key.startswith(HADOOP_PREFIX + "fs.")})
    return found


def _s3a(hadoop: Mapping[str, str], prefix: str) -> dict[str, str]:
    options = {option: hadoop[key] for key, option in _S3A.items() if key in hadoop}
    ssl_key = "fs.s3a.connection.ssl.enabled"
    ssl = parse_bool(prefix + ssl_key, hadoop[ssl_key]) if ssl_key in hadoop else True
    endpoint = hadoop.get("fs.s3a.endpoint", "").strip()
    if endpoint:
        if "://" not in endpoint:
            endpoint = ("https://" if ssl else "http://") + endpoint
        options["aws_endpoint_url"] = endpoint
    if not ssl or endpoint.startswith("http://"):
        options["aws_allow_http"] = "true"
    path_key = "fs.s3a.path.style.access"
    if path_key in hadoop and parse_bool(prefix + path_key, hadoop[path_key]):
        options["aws_virtual_hosted_style_request"] = "false"
    return options


def _azure(hadoop: Mapping[str, str], prefix: str) -> dict[str, str]:
    keys = {match.group(1): (key, value) for key, value in hadoop.items() if (match := _AZURE_KEY.match(key))}
    if not keys:
        return {}
    if len(keys) > 1:
        raise ConfigurationError(prefix + "fs.azure.account.key.*", "<several accounts: " + ", ".join(sorted(keys)) + ">",
                                 "one account's key: deltalake takes one set of storage options, so set "
                                 f"{STORAGE_PREFIX}azure_storage_account_name and "
                                 f"{STORAGE_PREFIX}azure_storage_account_key for the queues' account")
    account, (_key, secret) = next(iter(keys.items()))
    options = {"azure_storage_account_name": account, "azure_storage_account_key": secret}
    endpoint = hadoop.get("fs.azure.abfs.endpoint", "").strip()
    if endpoint:
        https_key = "fs.azure.always.use.https"
        https = parse_bool(prefix + https_key, hadoop[https_key]) if https_key in hadoop else True
        if "://" not in endpoint:
            endpoint = ("https://" if https else "http://") + endpoint
        options["azure_storage_endpoint"] = endpoint.rstrip("/") + "/" + account  # path-style, as an emulator serves it
        if endpoint.startswith("http://"):
            options["allow_http"] = "true"
    return options


def _gcs(hadoop: Mapping[str, str], prefix: str) -> dict[str, str]:
    """A key file becomes ``google_service_account``. An endpoint of its own
    (``fs.gs.storage.root.url``, an emulator's) with ``fs.gs.auth.type=UNAUTHENTICATED`` becomes a
    key without credentials that names it: object_store takes another endpoint only inside a
    service account key (``gcs_base_url``), and sends no token with ``disable_oauth``."""
    options = {}
    if hadoop.get(_GS_KEYFILE, "").strip():
        options["google_service_account"] = hadoop[_GS_KEYFILE].strip()
    root = hadoop.get("fs.gs.storage.root.url", "").strip().rstrip("/")
    auth = hadoop.get(_GS_AUTH, "").strip()
    if root and auth.upper() == "UNAUTHENTICATED":
        if "://" not in root:
            raise ConfigurationError(prefix + "fs.gs.storage.root.url", root, "a URL, such as http://127.0.0.1:4443/")
        options["google_service_account_key"] = json.dumps({
            "gcs_base_url": root, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""})
    return options


def parse_io(key: str, value: object) -> str:
    """How a process reaches the tables: one of :data:`IO_MODES`."""
    return parse_choice(key, value, IO_MODES)


def storage_options(conf: Mapping[str, str]) -> dict[str, str]:
    """The ``deltalake`` storage options a Spark conf gives: derived from its S3A, ABFS and GCS
    settings, then every ``spark.flow.storage.<key>`` (lower-cased, as deltalake names them);
    and ``spark.flow.io`` where the conf sets it (:data:`IO_OPTION`), which the store reads and
    deltalake never sees.

    Raises
    ------
    ConfigurationError
        A Hadoop boolean that is not true/false, a GCS endpoint that is not a URL, an explicit key that is not a deltalake option
        name, an empty value, or several Azure account keys; the message shows no secret.
    """
    hadoop = _hadoop(conf)
    prefix = HADOOP_PREFIX if any(key.startswith(HADOOP_PREFIX) for key in conf) else ""
    options = {**_s3a(hadoop, prefix), **_azure(hadoop, prefix), **_gcs(hadoop, prefix)}
    for key, value in conf.items():
        if key.lower().startswith(STORAGE_PREFIX):
            name = key[len(STORAGE_PREFIX):].lower()
            shown = secret_shown(name, value)
            if not _KEY.match(name):
                raise ConfigurationError(key, shown, f"{STORAGE_PREFIX}<a deltalake storage option>, such as "
                                         f"{STORAGE_PREFIX}aws_endpoint_url or {STORAGE_PREFIX}azure_storage_account_key")
            if not str(value).strip():
                raise ConfigurationError(key, shown, "a value that is not empty")
            options[name] = str(value)
    if conf.get(IO_OPTION):
        options[IO_OPTION] = parse_io(IO_OPTION, conf[IO_OPTION])
    return options


def as_conf(options: Mapping[str, str]) -> dict[str, str]:
    """Storage options as ``spark.flow.storage.*`` entries (``spark.flow.io`` as itself): how
    they travel in a data source's options to Python workers, which have no SparkSession."""
    return {key if key == IO_OPTION else STORAGE_PREFIX + key: value for key, value in options.items()}


def secret_shown(key: str, value: object) -> object:
    """A value as a message may show it: ``***`` when its key names a secret."""
    return "***" if _SECRET.search(key) else value


