"""Storage options: derived from the Spark conf a user sets for S3A, ABFS and GCS, explicit
``spark.flow.storage.*`` winning, no secret in any message; and deltalake reaching the suite's S3,
Azure Blob and GCS servers with them (the state tables and the CLI, which have no Spark)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.request import Request, urlopen

import pyarrow as pa
import pytest
from support.stores import S3_SECRET, Store

from spark_flow import ConfigurationError, FlowAdmin
from spark_flow.cli import main as cli_main
from spark_flow.cli import read_properties
from spark_flow.records.subscriptions import SubscriptionTable
from spark_flow.rules.keys import check_conf, split_options
from spark_flow.rules.storage_options import as_conf, storage_options

S3A = {
    "spark.hadoop.fs.s3a.endpoint": "127.0.0.1:9000",
    "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.hadoop.fs.s3a.access.key": "AKIAEXAMPLE",
    "spark.hadoop.fs.s3a.secret.key": S3_SECRET,
}


def test_s3a_settings_become_deltalake_options() -> None:
    assert storage_options(S3A) == {
        "aws_endpoint_url": "http://127.0.0.1:9000", "aws_region": "eu-west-1", "aws_allow_http": "true",
        "aws_virtual_hosted_style_request": "false", "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": S3_SECRET}
    https = storage_options({"spark.hadoop.fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com"})
    assert https == {"aws_endpoint_url": "https://s3.eu-west-1.amazonaws.com"}
    assert storage_options({"fs.s3a.endpoint.region": "us-east-2"}) == {"aws_region": "us-east-2"}  # core-site spelling
    assert storage_options({}) == {}


def test_abfs_account_key_and_endpoint_become_deltalake_options() -> None:
    conf = {"spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "a2V5",
            "spark.hadoop.fs.azure.abfs.endpoint": "127.0.0.1:10000", "spark.hadoop.fs.azure.always.use.https": "false"}
    assert storage_options(conf) == {"azure_storage_account_name": "acct", "azure_storage_account_key": "a2V5",
                                     "azure_storage_endpoint": "http://127.0.0.1:10000/acct", "allow_http": "true"}


def test_gcs_settings_become_deltalake_options() -> None:
    """A key file is passed on; an emulator's endpoint without authentication becomes a key that
    names it (object_store takes no other endpoint setting); an endpoint with credentials does not."""
    keyfile = {"spark.hadoop.fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE",
               "spark.hadoop.fs.gs.auth.service.account.json.keyfile": "/etc/gcs/key.json"}
    assert storage_options(keyfile) == {"google_service_account": "/etc/gcs/key.json"}
    emulator = storage_options({"spark.hadoop.fs.gs.storage.root.url": "http://127.0.0.1:4443/",
                                "spark.hadoop.fs.gs.auth.type": "unauthenticated"})
    assert list(emulator) == ["google_service_account_key"]
    assert json.loads(emulator["google_service_account_key"]) == {
        "gcs_base_url": "http://127.0.0.1:4443", "disable_oauth": True, "client_email": "", "private_key": "",
        "private_key_id": ""}
    assert storage_options({"spark.hadoop.fs.gs.storage.root.url": "https://gcs.example.com/"}) == {}
    with pytest.raises(ConfigurationError, match=r"spark.hadoop.fs.gs.storage.root.url='127.0.0.1:4443' is not valid"):
        storage_options({"spark.hadoop.fs.gs.storage.root.url": "127.0.0.1:4443",
                         "spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED"})


def test_explicit_storage_options_win_and_are_lower_cased() -> None:
    conf = {**S3A, "spark.flow.storage.AWS_REGION": "us-east-1", "spark.flow.storage.aws_allow_http": "false"}
    options = storage_options(conf)
    assert (options["aws_region"], options["aws_allow_http"]) == ("us-east-1", "false")
    # the flowqueue source gets them as options (lower-cased by Spark) and reads them back the same
    _own, _producer, passed = split_options({k.lower(): v for k, v in {"queue": "/q", **as_conf(options)}.items()},
                                            ("queue",))
    assert storage_options(passed) == options


@pytest.mark.parametrize(("conf", "key", "allowed"), [
    ({"spark.hadoop.fs.s3a.path.style.access": "yes"}, "spark.hadoop.fs.s3a.path.style.access", "true or false"),
    ({"spark.hadoop.fs.s3a.connection.ssl.enabled": "0"}, "spark.hadoop.fs.s3a.connection.ssl.enabled", "true or false"),
    ({"spark.flow.storage.aws-secret-access-key": S3_SECRET}, "spark.flow.storage.aws-secret-access-key",
     "spark.flow.storage.<a deltalake storage option>"),
    ({"spark.flow.storage.aws_secret_access_key": " "}, "spark.flow.storage.aws_secret_access_key", "not empty"),
    ({"spark.hadoop.fs.azure.account.key.a.dfs.core.windows.net": S3_SECRET,
      "spark.hadoop.fs.azure.account.key.b.dfs.core.windows.net": S3_SECRET}, "fs.azure.account.key.*",
     "spark.flow.storage.azure_storage_account_key"),
])
def test_bad_storage_settings_name_key_value_and_allowed_without_secrets(conf: dict[str, str], key: str,
                                                                         allowed: str) -> None:
    with pytest.raises(ConfigurationError, match=allowed.replace("*", r"\*")) as raised:
        storage_options(conf)
    assert key in str(raised.value) and S3_SECRET not in str(raised.value)


def test_a_misspelled_secret_key_is_named_without_its_value() -> None:
    with pytest.raises(ConfigurationError, match=r"spark\.flow\.storag\.aws_secret_access_key") as raised:
        check_conf({"spark.flow.storag.aws_secret_access_key": S3_SECRET})
    assert S3_SECRET not in str(raised.value)


@pytest.mark.parametrize("store", ["s3", "abfs", "gcs"], indirect=True)
def test_state_tables_and_the_cli_reach_object_storage(store: Store, tmp_path: Path) -> None:
    """A state table written and compare-and-set on the server with the derived options; the
    CLI reading the home there from a properties file, or from --storage-option, and failing
    without them in one line that shows no secret."""
    subs = SubscriptionTable(store.url("home", "q", "subscriptions"), "q", store.options)
    assert subs.create_table()
    assert subs.create("default", -1) and not subs.create("default", -1)
    assert subs.acknowledge("default", 0) and [s.position for s in subs.list()] == [0]
    FlowAdmin(store.url("home"), store.options).registry.register("q", store.url("queues", "q"))

    properties = tmp_path / "object-storage.conf"
    properties.write_text("".join(f"{key}  {value}\n" for key, value in store.conf.items()))
    home = ["--home", store.url("home")]
    assert cli_main([*home, "--properties-file", str(properties), "commands"]) == 0
    options = [part for key, value in store.options.items() for part in ("--storage-option", f"{key}={value}")]
    assert cli_main([*home, *options, "stop-producers", "q"]) == 0
    assert [c.command for c in FlowAdmin(store.url("home"), store.options).commands.read()] == ["stop-producers"]

    failed = subprocess.run([sys.executable, "-m", "spark_flow.cli", *home, "--storage-option",
                             f"{next(iter(store.options))}", "status"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert failed.returncode == 2 and "KEY=VALUE='***'" in failed.stderr, failed.stderr
    for secret in store.secrets:
        assert secret not in failed.stdout + failed.stderr


def test_deltalake_needs_what_the_gcs_server_adds(gcs_server: tuple[str, str, Path], tmp_path: Path) -> None:
    """fake-gcs-server as it is refuses deltalake's object upload (nothing is written) and lists
    from the first key where deltalake asks for those after one: the two requests the suite's GCS
    server (``tests/gcs``) adds. The day fake-gcs-server serves them, this fails: drop them."""
    from deltalake import write_deltalake
    from deltalake.exceptions import DeltaError
    from support.servers import gcs_server as start_gcs_server
    from support.stores import gcs_conf

    _endpoint, connector, binary = gcs_server
    with start_gcs_server(binary, "flow", tmp_path / "as-is.log", as_is=True) as endpoint:
        options = storage_options(gcs_conf(endpoint, connector))
        with pytest.raises(DeltaError, match=r"Error performing PUT .* 400 Bad Request.*invalid uploadType"):
            write_deltalake("gs://flow/t", pa.table({"id": [1]}), storage_options=options)
        for name in ("a", "b"):  # the emulator's JSON API upload
            urlopen(Request(f"{endpoint}/upload/storage/v1/b/flow/o?uploadType=media&name=t/{name}", data=b"x",
                            method="POST"), timeout=30).close()
        with urlopen(f"{endpoint}/flow?list-type=2&prefix=t/&start-after=t/a", timeout=30) as listing:
            assert re.findall(r"<Key>([^<]*)</Key>", listing.read().decode()) == ["t/a", "t/b"]


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_readme_cli_on_object_storage_as_written(store: Store, s3_server: str, tmp_path: Path) -> None:
    """The README's CLI lines for a home on S3, run as written against the suite's S3 server (its
    endpoint, this test's bucket folder, a properties file with the S3A settings)."""
    from test_readme import BIN, bash_blocks

    commands = bash_blocks("Clusters and object storage")[0]  # the next block, a cluster's, is test_cluster's
    (tmp_path / "my-s3.conf").write_text("".join(f"{key} {value}\n" for key, value in store.conf.items()))
    FlowAdmin(store.url("home"), store.options).registry.register("events", store.url("queues", "events"))
    # keys not given as options come from deltalake's own defaults: here the environment
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "spark-flow-tests", "AWS_SECRET_ACCESS_KEY": S3_SECRET,
           "AWS_REGION": "us-east-1"}
    outputs = []
    for words in commands:
        words = [w.replace("s3a://flow/home", store.url("home")).replace("http://127.0.0.1:9000", s3_server)
                 for w in words]
        result = subprocess.run([str(BIN / words[0]), *words[1:]], cwd=tmp_path, capture_output=True, text=True,
                                timeout=120, check=False, env=env)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout + result.stderr)
    assert "(none)" in outputs[0]  # no controller has written a status yet
    assert [c.command for c in FlowAdmin(store.url("home"), store.options).commands.read()] == ["stop-producers"]
    assert S3_SECRET not in "".join(outputs)


def test_object_storage_conf_is_spark_defaults_plus_the_file_systems() -> None:
    from support.stores import GCS_CONNECTOR_CONF, OBJECT_STORAGE_CONF

    defaults = read_properties(str(OBJECT_STORAGE_CONF.parent / "spark-defaults.conf"))
    conf = read_properties(str(OBJECT_STORAGE_CONF))
    assert {k: v for k, v in conf.items() if not k.startswith("spark.jars.")} == {
        k: v for k, v in defaults.items() if not k.startswith("spark.jars.")}
    packages, excludes = conf["spark.jars.packages"].split(","), conf["spark.jars.excludes"].split(",")
    assert packages[0] == defaults["spark.jars.packages"]
    assert {p.rsplit(":", 1)[0] for p in packages[1:]} == {
        "org.apache.hadoop:hadoop-aws", "software.amazon.awssdk:s3", "software.amazon.awssdk:s3-transfer-manager",
        "software.amazon.awssdk:sts", "org.apache.hadoop:hadoop-azure"}
    assert excludes[:len(defaults["spark.jars.excludes"].split(","))] == defaults["spark.jars.excludes"].split(",")
    assert "software.amazon.awssdk:bundle" in excludes
    # its GCS lines (commented: the connector's jar is the user's to fetch) are those the suite runs
    commented = [line[2:].split(None, 1) for line in OBJECT_STORAGE_CONF.read_text().splitlines()
                 if line.startswith("# spark.hadoop.fs.") and "gs" in line.split()[1]]
    assert {key.removeprefix("spark.hadoop."): value for key, value in commented
            if value != "..." and ".auth." not in key} == GCS_CONNECTOR_CONF
