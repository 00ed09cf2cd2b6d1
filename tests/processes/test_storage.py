"""deltalake reaching the suite's S3, Azure Blob and GCS servers with the storage options spark-flow
derives from a user's Spark conf (the state tables and the CLI, which have no Spark), no secret in
any message; the options themselves: tests/pure/test_storage.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.request import Request, urlopen

import pyarrow as pa
import pytest
from support.stores import S3_SECRET, Store

from spark_flow import FlowAdmin
from spark_flow.cli import main as cli_main
from spark_flow.records.subscriptions import SubscriptionTable
from spark_flow.rules.storage_options import storage_options


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
    """The CLI lines of docs/deployment.md for a home on S3, run as written against the suite's S3
    server (its endpoint, this test's bucket folder, a properties file with the S3A settings)."""
    from support.docs import BIN, bash_blocks

    commands = bash_blocks("docs/deployment.md", "Clusters and object storage")[0]  # the next block, a cluster's, is test_cluster's
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
