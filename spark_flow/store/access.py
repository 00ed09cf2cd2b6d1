"""Reaching storage from this Python: what a process lacks when it cannot, and removing files.

Spark's credentials need not be Python's: a Hadoop credential provider, an instance profile
or Unity Catalog's vended credentials reach the engine's JVM only (Databricks standard and
serverless compute run Python in a sandbox). So a ``deltalake`` failure to reach storage is
named here (:func:`access_error`): what this process lacks and which setting gives it.

deltalake has no call that removes files (a deleted queue's table and state): pyarrow's file
systems do, reached with the same options (:func:`file_system`), on local paths, S3, ABFS and GCS;
on HDFS the client deltalake's own HDFS store is built on, ``hdfs-native`` (Rust: no JVM, no
``libhdfs``, which pyarrow's HDFS file system needs). deltalake's own file system handler was not
enough: on S3 it leaves the directory markers Hadoop's S3A writes (keys ending in ``/``), on a
local disk the empty directories.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from spark_flow.exceptions import ConfigurationError, StorageAccessError, one_line
from spark_flow.rules.names import normalize_path
from spark_flow.rules.storage_options import STORAGE_PREFIX

#: How many looks a removal takes at most: a marker blob, then its directory, which a writer may
#: change under the walk.
_WALKS = 10
#: How a failure for want of credentials in this Python begins (``spark.flow.io`` auto then takes the engine).
NO_CREDENTIALS = "deltalake has no"
#: Where :func:`remove_location` removes files.
REMOVABLE = "a local path, s3:// (s3a://), abfs:// (abfss://), az://, gs:// or hdfs://"
#: How often hdfs-native's client tries a namenode that does not answer (it sleeps 0.5 s, 1 s,
#: 2 s ... between tries; its own default, 15 tries, waits 3 minutes): deltalake's HDFS store
#: fails at once, and so does what it reached a moment ago. An hdfs storage option wins.
_NAMENODE_TRIES = {"dfs.client.failover.max.attempts": "2"}


def _option(options: Mapping[str, str], *names: str) -> str | None:
    """The first of ``names`` (deltalake's spellings of one option) that ``options`` sets."""
    return next((options[name] for name in names if options.get(name)), None)


def _authority(url: str) -> tuple[str, str]:
    """An endpoint URL as pyarrow takes it: ``host[:port]`` and its scheme."""
    scheme, _, rest = url.partition("://")
    return rest.split("/", 1)[0], scheme or "https"


def _s3_file_system(options: Mapping[str, str]) -> Any:
    from pyarrow.fs import S3FileSystem

    endpoint = _option(options, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
    authority, scheme = _authority(endpoint) if endpoint else (None, "https")
    return S3FileSystem(
        access_key=_option(options, "aws_access_key_id", "access_key_id"),
        secret_key=_option(options, "aws_secret_access_key", "secret_access_key"),
        session_token=_option(options, "aws_session_token", "aws_token", "session_token", "token"),
        region=_option(options, "aws_region", "region", "aws_default_region"),
        endpoint_override=authority, scheme=scheme,
        force_virtual_addressing=_option(options, "aws_virtual_hosted_style_request",
                                         "virtual_hosted_style_request") == "true")


def _azure_file_system(account: str | None, options: Mapping[str, str]) -> Any:
    from pyarrow.fs import AzureFileSystem

    account = account or _option(options, "azure_storage_account_name", "account_name")
    if not account:
        raise ConfigurationError(STORAGE_PREFIX + "azure_storage_account_name", None, "the storage account's name, "
                                 "or a location abfs[s]://<container>@<account>.dfs.core.windows.net/...")
    endpoint = _option(options, "azure_storage_endpoint", "azure_endpoint", "endpoint")
    authority, scheme = _authority(endpoint) if endpoint else (None, None)
    key = _option(options, "azure_storage_account_key", "azure_storage_access_key", "account_key", "access_key",
                  "azure_storage_master_key", "master_key")
    sas = _option(options, "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token")
    client = {name: _option(options, f"azure_{name}", f"azure_storage_{name}", name)
              for name in ("client_id", "client_secret", "tenant_id")}
    return AzureFileSystem(account_name=account, account_key=key, sas_token=None if key else sas,
                           blob_storage_authority=authority,
                           dfs_storage_authority=authority, blob_storage_scheme=scheme, dfs_storage_scheme=scheme,
                           **{name: value for name, value in client.items() if value})


def _gcs_file_system(options: Mapping[str, str]) -> Any:
    """pyarrow's GCS file system at the endpoint a key names (``gcs_base_url``, anonymous with
    ``disable_oauth``: an emulator's); elsewhere with Google's default credentials, which pyarrow
    finds as deltalake does (``GOOGLE_APPLICATION_CREDENTIALS``, the metadata server)."""
    from pyarrow.fs import GcsFileSystem

    key = _option(options, "google_service_account_key", "service_account_key")
    if key:
        try:
            found = json.loads(key)
        except ValueError:
            found = None
        if isinstance(found, dict) and found.get("gcs_base_url"):
            authority, scheme = _authority(str(found["gcs_base_url"]))
            return GcsFileSystem(anonymous=bool(found.get("disable_oauth")), endpoint_override=authority,
                                 scheme=scheme)
    return GcsFileSystem()


def file_system(location: str, options: Mapping[str, str]) -> tuple[Any, str]:
    """A pyarrow file system reaching ``location`` with deltalake's storage ``options`` (the same
    endpoint and credentials), and the location's path in it: what removes files where
    deltalake has no call for it (a queue's deletion).

    Raises
    ------
    ConfigurationError
        A scheme other than a local path, ``s3``/``s3a``/``s3n``, ``abfs``/``abfss``/``az``, ``gs``.
    """
    from pyarrow.fs import LocalFileSystem

    location = normalize_path(location)
    if "://" not in location:
        return LocalFileSystem(), os.path.abspath(location)
    scheme, _, rest = location.partition("://")
    rest = rest.rstrip("/")
    if scheme.lower() in ("s3", "s3a", "s3n"):
        return _s3_file_system(options), rest
    if scheme.lower() in ("abfs", "abfss", "az", "azure"):
        host, _, path = rest.partition("/")
        container, _, account_host = host.partition("@")
        account = account_host.split(".", 1)[0] if account_host else None
        return _azure_file_system(account, options), posixpath.join(container, path).rstrip("/")
    if scheme.lower() == "gs":
        return _gcs_file_system(options), rest
    raise ConfigurationError("location", location, f"a location on storage spark-flow removes files from: {REMOVABLE}")


def _is_hdfs(location: str) -> bool:
    return location.partition("://")[0].lower() == "hdfs" and "://" in location


def _hdfs_client(location: str, options: Mapping[str, str]) -> tuple[Any, str]:
    """hdfs-native's client for the namenode an ``hdfs://`` location names (none: the default
    file system of ``HADOOP_CONF_DIR``'s core-site.xml), with deltalake's storage ``options`` as
    its Hadoop settings, as deltalake's HDFS store takes them; and the location's path."""
    from hdfs_native import Client

    authority, _, path = location.partition("://")[2].partition("/")
    client = Client(f"hdfs://{authority}" if authority else None, config={**_NAMENODE_TRIES, **options})
    return client, "/" + path.rstrip("/")


@contextmanager
def _hdfs_errors(location: str) -> Iterator[None]:
    """hdfs-native's errors as the ``OSError`` a storage failure is everywhere else: the namenode's
    refusals (a Java exception's class and message: permissions, safe mode) come as RuntimeError."""
    try:
        yield
    except RuntimeError as error:
        raise OSError(f"HDFS refused an operation at {location}: {error}") from None


def location_exists(location: str, options: Mapping[str, str]) -> bool:
    """Whether anything is at ``location``: a file, or a directory (holding files or not)."""
    from pyarrow.fs import FileType

    if _is_hdfs(location):
        client, path = _hdfs_client(location, options)
        try:
            with _hdfs_errors(location):
                client.get_file_info(path)
        except FileNotFoundError:
            return False
        return True
    files, path = file_system(location, options)
    return bool(files.get_file_info(path).type != FileType.NotFound)


def remove_location(location: str, options: Mapping[str, str]) -> None:
    """Remove everything at ``location`` (a directory and what it holds, or a file): nothing if
    there is nothing. Hadoop's ABFS, on a storage account without a hierarchical namespace,
    marks a directory with an empty blob of its own name, which pyarrow takes for a file: once
    it is removed, the directory's blobs are. pyarrow's GCS file system removes a directory's
    objects, then its marker object (``<path>/``), and fails if there was none (deltalake writes
    none): the directory is gone all the same. A writer at work in the directory (a producer's
    write job: Hadoop's committer makes and removes its ``_temporary`` folder) removes or adds
    entries under the walk: the walk starts again, a few times, while the directory is there.
    On HDFS a directory goes in one namenode operation."""
    from pyarrow.fs import FileType

    if _is_hdfs(location):
        client, path = _hdfs_client(location, options)
        with _hdfs_errors(location):
            client.delete(path, recursive=True)  # False, not an error, when nothing is there
        return
    files, path = file_system(location, options)
    for walk in range(1, _WALKS + 1):
        kind = files.get_file_info(path).type
        if kind == FileType.NotFound:
            return
        if kind == FileType.File:
            files.delete_file(path)
            continue
        try:
            files.delete_dir(path)
        except OSError as error:
            if files.get_file_info(path).type == FileType.NotFound:
                return
            if walk == _WALKS or error.errno not in (errno.ENOENT, errno.ENOTEMPTY):
                raise
            time.sleep(0.01 * walk)


#: Per storage: the deltalake options (and environment variables) that give credentials, and
#: the settings that give them to every spark-flow process.
_CREDENTIALS = {
    "s3": (("aws_access_key_id", "access_key_id", "aws_profile", "profile", "aws_web_identity_token_file",
            "aws_container_credentials_relative_uri", "aws_skip_signature", "skip_signature"),
           ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
           "S3", f"{STORAGE_PREFIX}aws_access_key_id and {STORAGE_PREFIX}aws_secret_access_key (or "
                 "spark.hadoop.fs.s3a.access.key and .secret.key)"),
    "azure": (("azure_storage_account_key", "azure_storage_access_key", "account_key", "access_key",
               "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token", "azure_client_secret",
               "client_secret", "azure_storage_token", "bearer_token", "azure_federated_token_file",
               "azure_use_azure_cli", "azure_storage_use_emulator", "use_emulator", "azure_skip_signature"),
              ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"),
              "Azure", f"{STORAGE_PREFIX}azure_storage_account_key (or spark.hadoop.fs.azure.account.key."
                       "<account>.dfs.core.windows.net), or a service principal's azure_client_id, "
                       "azure_client_secret and azure_tenant_id"),
    "gs": (("google_service_account", "google_service_account_path", "service_account", "google_service_account_key",
            "service_account_key", "google_application_credentials", "google_skip_signature"),
           ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_KEY", "GOOGLE_APPLICATION_CREDENTIALS"),
           "GCS", f"{STORAGE_PREFIX}google_service_account (a key file) or "
                  f"{STORAGE_PREFIX}google_service_account_key"),
}
_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "abfs": "azure", "abfss": "azure", "az": "azure", "azure": "azure",
            "gs": "gs"}
#: Where a sandboxed Python gets credentials the engine has: said with every missing credential.
WHERE_TO_GIVE = ("in the Spark conf the session starts with (on Databricks from a secret: "
                 "{{secrets/<scope>/<key>}} in the cluster's or job's Spark config). Spark's own credentials "
                 "(a Hadoop credential provider, an instance profile, Unity Catalog's vended credentials) "
                 "stay in its JVM and do not reach Python (Databricks standard and serverless compute)")
_NO_INSTANCE_CREDENTIALS = re.compile(r"169\.254\.169\.254|/latest/api/token|/latest/meta-data|/metadata/identity|"
                                      r"computeMetadata|credential", re.I)
_REFUSED = re.compile(r"\b(403|401)\b|Forbidden|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|"
                      r"AuthorizationFailure|AuthenticationFailed|lacked the necessary privileges", re.I)
_UNREACHABLE = re.compile(r"Connection refused|tcp connect error|dns error|error sending request|timed out|"
                          r"No route to host|Name or service not known", re.I)


def access_error(location: str, options: Mapping[str, str], error: BaseException) -> StorageAccessError | None:
    """What a ``deltalake`` failure at ``location`` says this process lacks (credentials, the
    right ones, a reachable endpoint or namenode), as a :class:`StorageAccessError` naming the
    settings that give it; None when it is none of these (a local path, another failure)."""
    if _is_hdfs(location):
        return namenode_error(location, one_line(error))
    kind = _SCHEMES.get(location.partition("://")[0].lower()) if "://" in location else None
    if kind is None:
        return None
    names, variables, what, settings = _CREDENTIALS[kind]
    text = one_line(error)
    has_credentials = any(options.get(name) for name in names) or any(os.environ.get(v) for v in variables)
    if not has_credentials and (_NO_INSTANCE_CREDENTIALS.search(text) or _REFUSED.search(text)):
        return StorageAccessError(location, f"{NO_CREDENTIALS} {what} credentials here (its storage options give "
                                  "none, nor do the environment and instance metadata)",
                                  f"give them as {settings}, {WHERE_TO_GIVE}")
    if _REFUSED.search(text):
        code = next(iter(re.findall(r"InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|Forbidden", text)), "403")
        return StorageAccessError(location, f"the storage refused this process's {what} credentials ({code})",
                                  f"check {settings}")
    if _UNREACHABLE.search(text):
        endpoint = next(iter(re.findall(r"(https?://[^/\s]+)", text)), "its endpoint")
        setting = {"s3": "spark.hadoop.fs.s3a.endpoint (or spark.flow.storage.aws_endpoint_url)",
                   "azure": "spark.hadoop.fs.azure.abfs.endpoint (or spark.flow.storage.azure_storage_endpoint)",
                   "gs": "spark.hadoop.fs.gs.storage.root.url (an emulator's; GCS itself needs none)"}[kind]
        return StorageAccessError(location, f"deltalake cannot connect to {endpoint}",
                                  f"check {setting}, and that this machine reaches it")
    return None


def namenode_error(location: str, text: str) -> StorageAccessError | None:
    """An ``hdfs://`` location whose namenode did not answer (``text``: the failure, any
    client's): the namenode is the URL's, not a setting's, so the error names the address
    tried and where it comes from; None for another failure."""
    if not _UNREACHABLE.search(text) and "ConnectException" not in text and "UnknownHost" not in text:
        return None
    authority = location.partition("://")[2].split("/", 1)[0]
    tried = (f"the namenode at {authority} (the location's hdfs:// URL names it)" if authority
             else "the namenode of fs.defaultFS (core-site.xml in HADOOP_CONF_DIR)")
    return StorageAccessError(location, f"cannot connect to {tried}",
                              "check the namenode's host and RPC port in the hdfs:// URLs (spark.flow.home, the "
                              "queues' paths: the cluster's fs.defaultFS, often port 8020), and that this machine "
                              "reaches it")


@contextmanager
def named_access_errors(location: str, options: Mapping[str, str]) -> Iterator[None]:
    """Turn a ``deltalake`` failure to reach ``location`` into the :class:`StorageAccessError`
    that names what is missing (:func:`access_error`); other errors pass as they are."""
    try:
        yield
    except StorageAccessError:  # named already, where it was first seen
        raise
    except OSError as error:
        named = access_error(location, options, error)
        if named is None:
            raise
        raise named from None


def check_access(location: str, options: Mapping[str, str]) -> bool:
    """Look at ``location`` once (a read, nothing written), the way this process reaches it
    (:mod:`spark_flow.store.io`): a process that cannot reach it fails here, before it writes
    anything, with what it lacks. Returns whether a Delta table is there."""
    from spark_flow.store.table import is_table

    with named_access_errors(location, options):
        return is_table(normalize_path(location), options)
