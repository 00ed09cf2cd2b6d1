"""Storage options: derived from the Spark conf a user sets for S3A, ABFS and GCS, explicit
``spark.flow.storage.*`` winning, no secret in any message; deltalake reaching the suite's servers
with them: tests/processes/test_storage.py."""

from __future__ import annotations

import json

import pytest
from support.stores import S3_SECRET

from spark_flow import ConfigurationError
from spark_flow.cli import read_properties
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
