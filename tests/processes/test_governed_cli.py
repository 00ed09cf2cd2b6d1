"""The ``spark-flow`` command line on governed compute (tests/processes/test_governed.py's shape:
an S3 server refusing unsigned requests, a Spark Connect server whose JVM alone holds the keys):
with ``--remote`` every command works through the Connect session, with no storage credential in
the CLI's Python."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest
from support.processes import ROOT
from support.servers import Governed

pytestmark = pytest.mark.processes


def test_governed_cli_through_the_connect_session(governed_connect: Governed) -> None:
    """``spark-flow --remote`` on the governed server, with no storage credential in the CLI's
    Python: declare, set, stop-producers, status, why and doctor work through the engine
    (``spark.flow.io=engine``, the default with a remote), doctor says so and passes, and no
    output shows a key. (Status shows what the controller last wrote: nothing before it ran.)"""
    unique = uuid.uuid4().hex[:12]
    home, queue = f"s3a://flow/{unique}/home", f"s3a://flow/{unique}/q"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "SPARK_REMOTE"))}
    env.update(governed_connect.env)  # instance metadata refused: nothing here reaches the bucket
    runs: list[subprocess.CompletedProcess[str]] = []

    def cli(*args: str) -> str:
        started = time.monotonic()
        run = subprocess.run([str(Path(sys.executable).parent / "spark-flow"), "--remote", governed_connect.url,
                              "--home", home, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        runs.append(run)
        print(f"$ spark-flow {' '.join(args)}  ({time.monotonic() - started:.1f} s)\n{run.stdout}{run.stderr}")
        assert (run.returncode, run.stderr) == (0, ""), args
        return run.stdout

    declared = cli("declare", queue, "--schema", "id BIGINT, body STRING", "--set", "stopCount=5", "resumeCount=2")
    assert declared.startswith(f"queue 'q' at {queue}: Thresholds(stop_count=5, resume_count=2,"), declared
    assert cli("set", "q", "stopCount=900") == "command 0: set stopCount=900 on 'q', applied by the controller\n"
    assert cli("stop-producers", "q") == "command 1: stop-producers 'q', applied by the controller\n"
    assert cli("status").splitlines()[1:] == ["(none)"]  # no controller has run
    assert cli("why", "q") == "q: does not hold its producers (depth 0 messages, 0 bytes; stop 5 / resume 2 messages)\n"
    doctor = cli("doctor", "q").splitlines()
    assert "ok    store: engine (spark.flow.io=engine)" in doctor
    assert f"ok    queue q: {queue}: depth by subscription default 0" in doctor
    assert doctor[-1] == "8 of 8 checks passed", doctor
    s3 = boto3.client("s3", endpoint_url=governed_connect.endpoint, region_name="us-east-1",
                      aws_access_key_id=governed_connect.key, aws_secret_access_key=governed_connect.secret)
    assert s3.list_objects_v2(Bucket="flow", Prefix=f"{unique}/q/_delta_log/")["KeyCount"]  # the engine wrote it
    for run in runs:
        assert governed_connect.key not in run.stdout + run.stderr
        assert governed_connect.secret not in run.stdout + run.stderr
