"""Governed compute, as Databricks standard and serverless compute are: the Spark engine holds the
storage's credentials (here a Hadoop credential store its JVM reads), the Python that runs
spark-flow's code (the client, the server's foreachBatch and data source workers, the CLI) has
none. There spark-flow reads and writes through the engine (``spark.flow.io`` auto or engine): a
producer and a consumer, each a job of its own run to completion (``availableNow``, serverless's
only trigger), share a queue under flow control. Told to use deltalake, each entry point fails
before it writes to a queue, with one line naming what is missing and where to give it; given
credentials through ``spark.flow.storage.*``, it works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest
from support.processes import ROOT
from support.servers import Governed

pytestmark = pytest.mark.processes

#: A Spark Connect client trying each entry point in turn; prints what each raised, as JSON.
CLIENT = """
import json, sys
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from spark_flow import declare, enqueue_stream, open_queue, read_queue, start_controller, storage_options

url, queue, home, key, secret = sys.argv[1:]
spark = SparkSession.builder.remote(url).getOrCreate()
spark.conf.set("spark.flow.io", "deltalake")  # this Python's own reads: what each entry point lacks
seen = {}

def attempt(name, action):
    try:
        action()
        seen[name] = None
    except Exception as error:
        seen[name] = str(error)

attempt("declare", lambda: declare(spark, queue, "id BIGINT"))
spark.conf.set("spark.flow.storage.aws_access_key_id", key)  # the fix the message names
spark.conf.set("spark.flow.storage.aws_secret_access_key", secret)
seen["a table after the refused declare"] = DeltaTable.is_deltatable(queue, storage_options(dict(spark.conf.getAll)))
attempt("declare with spark.flow.storage.*", lambda: declare(spark, queue, "id BIGINT"))
seen["declared version"] = open_queue(queue, storage_options(dict(spark.conf.getAll))).refresh()
spark.conf.unset("spark.flow.storage.aws_access_key_id")
spark.conf.unset("spark.flow.storage.aws_secret_access_key")

def produce():
    rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load().selectExpr("value AS id")
    query = enqueue_stream(rows, queue, home + "/checkpoints/producer", query_name="producer",
                           trigger={"processingTime": "1 second"})
    query.awaitTermination(60)
    query.stop()
    raise AssertionError("the producer ran for 60 s")
attempt("producer", produce)
attempt("consumer", lambda: read_queue(spark, queue).columns)  # analysed: the source asked for its schema

def control():
    query = start_controller(spark, home, trigger="1 second")
    query.awaitTermination(60)
    query.stop()
    raise AssertionError("the controller ran for 60 s")
attempt("controller", control)
print(json.dumps(seen))
"""

MISSING = ("from this Python process: deltalake has no S3 credentials here (its storage options give none, nor do "
           "the environment and instance metadata); give them as spark.flow.storage.aws_access_key_id and "
           "spark.flow.storage.aws_secret_access_key (or spark.hadoop.fs.s3a.access.key and .secret.key), in the "
           "Spark conf the session starts with (on Databricks from a secret: {{secrets/<scope>/<key>}} in the "
           "cluster's or job's Spark config). Spark's own credentials (a Hadoop credential provider, an instance "
           "profile, Unity Catalog's vended credentials) stay in its JVM and do not reach Python (Databricks "
           "standard and serverless compute)")


def _line(text: str | None) -> str:
    """The one line of ``text`` (an error's message, with Spark's around it) that spark-flow wrote."""
    assert text is not None, "it did not fail"
    [line] = {line.strip() for line in text.splitlines() if "from this Python process" in line}
    return line[line.index("cannot use"):]


def _keys(governed: Governed, prefix: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=governed.endpoint, region_name="us-east-1",
                      aws_access_key_id=governed.key, aws_secret_access_key=governed.secret)
    return sorted(item["Key"] for item in s3.list_objects_v2(Bucket="flow", Prefix=prefix).get("Contents", []))


def test_told_to_use_deltalake_each_entry_point_names_the_missing_credentials(governed_connect: Governed,
                                                                         tmp_path: Path) -> None:
    """On the governed server: declare refused before Spark creates the table, then working with
    ``spark.flow.storage.*``; the producer failing its first batch with the queue unchanged; the
    consumer refused at ``load()``; the controller's query failing; the CLI exiting 1. Each says
    the same one line."""
    queue, home = "s3a://flow/governed/events", "s3a://flow/governed/home"
    env = {**os.environ, **governed_connect.env}
    client = subprocess.run([sys.executable, "-c", CLIENT, f"{governed_connect.url}/;session_id={uuid.uuid4()}", queue, home,
                             governed_connect.key, governed_connect.secret],
                            capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert client.returncode == 0, client.stderr[-5000:]
    seen = json.loads(client.stdout.splitlines()[-1])
    print(json.dumps(seen, indent=1))

    assert _line(seen["declare"]) == f"cannot use {queue} {MISSING}"
    assert seen["a table after the refused declare"] is False
    assert seen["declare with spark.flow.storage.*"] is None
    commits = [key for key in _keys(governed_connect, "governed/events/_delta_log/") if key.endswith(".json")]
    assert len(commits) == seen["declared version"] + 1, commits  # the producer wrote nothing after the declare
    assert _line(seen["producer"]) == f"cannot use {queue} {MISSING}"
    assert _line(seen["consumer"]) == f"cannot use {queue} {MISSING}"
    assert _line(seen["controller"]) == f"cannot use {home} {MISSING}"

    properties = tmp_path / "governed.conf"
    properties.write_text("".join(f"{key} {value}\n" for key, value in governed_connect.conf.items()))
    cli = subprocess.run([str(Path(sys.executable).parent / "spark-flow"), "--home", home, "--properties-file",
                          str(properties), "status"], capture_output=True, text=True, timeout=60, env=env)
    assert (cli.returncode, cli.stdout) == (1, "")
    assert re.fullmatch(f"spark-flow status: error: cannot use {home}/_spark_flow/\\w+ {re.escape(MISSING)}\n", cli.stderr)
    for run in (client, cli):
        assert governed_connect.secret not in run.stdout + run.stderr
