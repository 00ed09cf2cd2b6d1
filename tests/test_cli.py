"""The ``spark-flow`` command line on a real home: declare, status, set, stop/start, plot, errors."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_flow.cli import main
from spark_flow.flow.homeflow import HomeFlow
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.status import append_history
from spark_flow.rules.state import Thresholds


@pytest.fixture
def home(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    home = str(tmp_path / "home")
    queue = str(tmp_path / "queues" / "orders.eu")
    assert main(["--home", home, "declare", queue, "--schema", "id BIGINT, body STRING",
                 "--set", "stopCount=5", "resumeCount=2"]) == 0
    assert "queue 'orders.eu'" in capsys.readouterr().out
    return home


def test_declare_registers_and_status_lists_nothing_before_the_controller_ran(
        home: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert list(FlowAdmin(home).queues()) == ["orders.eu"]
    assert main(["--home", home, "status"]) == 0
    out = capsys.readouterr().out
    assert "flowStoppedCount" in out and "(none)" in out


def test_commands_are_appended_in_order(home: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", home, "set", "orders.*", "stopCount=50", "resumeCount=20"]) == 0
    assert main(["--home", home, "stop-producers", "orders.eu"]) == 0
    assert main(["--home", home, "start-producers"]) == 0
    capsys.readouterr()
    assert main(["--home", home, "commands"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in lines[1:]] == [["set", "orders.*"], ["stop-producers", "orders.eu"],
                                                         ["start-producers", ">"]]
    assert "stopCount=50 resumeCount=20" in lines[1]
    assert main(["--home", home, "subscriptions", "orders.eu"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:5] == ["default", "-1", "0", "false", "0"]


def test_set_home_records_the_home_limits_at_once(home: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", home, "set-home", "homeStopCount=1000", "homeResumeSize=8k", "homeStopSize=1m"]) == 0
    assert "in force now" in capsys.readouterr().out
    assert HomeFlow(home).thresholds() == Thresholds(1000, 1000, 1024**2, 8 * 1024)
    assert main(["--home", home, "unset-home", "homeStopSize", "homeResumeSize"]) == 0
    assert HomeFlow(home).thresholds() == Thresholds(1000, 1000)
    capsys.readouterr()
    assert main(["--home", home, "commands"]) == 0
    assert [line.split()[1:3] for line in capsys.readouterr().out.splitlines()[1:]] == [
        ["set-home", ">"], ["unset-home", ">"]]


@pytest.mark.parametrize(("argv", "message"), [
    (["set", "orders.eu", "stopCount=abc"], "stopCount='abc' is not valid: allowed is a whole number"),
    (["set", "orders.eu", "resumeCount=9"], "resumeCount='9' is not valid: allowed is a value <= flow.stopCount=5"),
    (["set", "orders.eu", "stopCount"], "KEY=VALUE='stopCount' is not valid"),
    (["set", "orders.eu", "stopCuont=3"], "Did you mean 'stopCount'"),
    (["set", "orders.eu", "stopAge=5s", "resumeAge=10s"], "resumeAge='10s' is not valid: allowed is a value <= stopAge=5s"),
    (["stop-producers", "payments"], "queue 'payments' not found: no registered queue matches"),
    (["subscriptions", "payments"], "queue 'payments' not found: not registered"),
    (["delete", "payments"], "queue 'payments' not found: not registered in"),
    (["plot", "orders.eu"], "has no samples of subscription 'default' yet"),
    (["set-home", "homeStopCount=5", "homeResumeCount=9"], "homeResumeCount='9' is not valid: allowed is a value <= homeStopCount=5"),
    (["set-home", "homeStopCount=-5"], "homeStopCount='-5' is not valid: allowed is a whole number"),
    (["set-home", "stopCount=5"], "stopCount='5' is not valid: allowed is a home setting: homeStopCount"),
    (["set", "orders.eu", "homeStopCount=5"], "homeStopCount='5' is not valid: allowed is a queue setting here"),
], ids=["not-a-number", "resume-above-stop", "no-value", "unknown-key", "age-resume-above-stop", "unknown-queue", "unknown-queue-subs", "delete-unknown-queue",
        "plot-no-history", "home-resume-above-stop", "home-negative", "home-queue-key", "queue-home-key"])
def test_bad_input_one_line_error_and_nothing_written(home: str, argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", home, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert FlowAdmin(home).commands.latest() == -1


def test_plot_draws_the_history(home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    depths = [0, 3, 6, 7, 4, 1, 0]
    samples = [{"time": start + timedelta(seconds=i), "queue": "orders.eu", "subscription": "default",
                "event": "sample", "depth_count": d, "depth_size": 9 * d, "stop_count": 5, "resume_count": 2,
                "stop_size": 0, "resume_size": 0, "flow_stopped": 2 <= i <= 5, "flow_stopped_count": 1,
                "producers_stopped": False, "detail": None} for i, d in enumerate(depths)]
    append_history(home, samples, "test", 0)
    out = tmp_path / "orders.png"
    assert main(["--home", home, "plot", "orders.eu", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.short_processes
def test_console_script_without_home_names_the_option(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "spark-flow"
    result = subprocess.run([str(script), "status"], capture_output=True, text=True, timeout=120,
                            env={"PATH": str(script.parent)})
    assert result.returncode == 2
    assert "--home=None is not valid" in result.stderr and "SPARK_FLOW_HOME" in result.stderr


def test_unreachable_storage_is_one_line_naming_the_home_without_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    """A home the CLI cannot reach (here: nothing listens at the S3 endpoint) is one error line that
    names the home and storage's reason, exit status 1, and never shows a key."""
    home = "s3a://flow/home"
    argv = ["--home", home, "--storage-option", "aws_endpoint_url=http://127.0.0.1:1", "--storage-option",
            "allow_http=true", "--storage-option", "aws_access_key_id=tests", "--storage-option",
            "aws_secret_access_key=s3cr3t-Never-Shown", "--storage-option", "aws_region=us-east-1",
            "--storage-option", "max_retries=1", "status"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"spark-flow status: error: cannot use {home}/_spark_flow/")
    assert "deltalake cannot connect to http://127.0.0.1:1; check spark.hadoop.fs.s3a.endpoint" in err
    assert "s3cr3t" not in err and "\x1b" not in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "status"), [
    (["subscriptions", "orders.eu"], 0),
    (["status"], 0),
    (["stop-producers", "ev*"], 2),
    (["set", "orders.eu", "stopCount=abc"], 2),
], ids=["subscriptions", "status", "refused-stop-producers", "refused-set"])
@pytest.mark.short_processes
def test_console_script_exit_status_is_the_same_every_time(home: str, argv: list[str], status: int) -> None:
    """The exit status is a contract for scripts: 0 when the command did its work, 2 when it
    refused, in each of 12 runs (deltalake's native threads must not abort the interpreter at
    exit, delta-io/delta-rs#2184), 4 runs at a time."""
    from concurrent.futures import ThreadPoolExecutor

    script = Path(sys.executable).parent / "spark-flow"

    def run(_: int) -> tuple[int, str]:
        result = subprocess.run([str(script), "--home", home, *argv], capture_output=True, text=True, timeout=120)
        return result.returncode, result.stderr[-300:]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(12)))
    assert [code for code, _ in results] == [status] * 12, [r for r in results if r[0] != status][:2]
