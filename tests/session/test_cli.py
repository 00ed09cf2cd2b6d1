"""The ``spark-flow`` command line on a real home: declare, status, set, stop/start, plot, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.docs import ROOT, bash_blocks

from spark_flow.cli import main
from spark_flow.flow.homeflow import HomeFlow
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.status import append_history
from spark_flow.rules.flow_state import Thresholds
from spark_flow.rules.keys import conf_settings


def test_declare_registers_and_status_lists_nothing_before_the_controller_ran(
        cli_home: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert list(FlowAdmin(cli_home).queues()) == ["orders.eu"]
    assert main(["--home", cli_home, "status"]) == 0
    out = capsys.readouterr().out
    assert "flowStoppedCount" in out and "(none)" in out


def test_commands_are_appended_in_order(cli_home: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", cli_home, "set", "orders.*", "stopCount=50", "resumeCount=20"]) == 0
    assert main(["--home", cli_home, "stop-producers", "orders.eu"]) == 0
    assert main(["--home", cli_home, "start-producers"]) == 0
    capsys.readouterr()
    assert main(["--home", cli_home, "commands"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in lines[1:]] == [["set", "orders.*"], ["stop-producers", "orders.eu"],
                                                         ["start-producers", ">"]]
    assert "stopCount=50 resumeCount=20" in lines[1]
    assert main(["--home", cli_home, "subscriptions", "orders.eu"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:5] == ["default", "-1", "0", "false", "0"]


def test_set_home_records_the_home_limits_at_once(cli_home: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", cli_home, "set-home", "homeStopCount=1000", "homeResumeSize=8k", "homeStopSize=1m"]) == 0
    assert "in force now" in capsys.readouterr().out
    assert HomeFlow(cli_home).thresholds() == Thresholds(1000, 1000, 1024**2, 8 * 1024)
    assert main(["--home", cli_home, "unset-home", "homeStopSize", "homeResumeSize"]) == 0
    assert HomeFlow(cli_home).thresholds() == Thresholds(1000, 1000)
    capsys.readouterr()
    assert main(["--home", cli_home, "commands"]) == 0
    assert [line.split()[1:3] for line in capsys.readouterr().out.splitlines()[1:]] == [
        ["set-home", ">"], ["unset-home", ">"]]


def test_the_home_wide_limits_lines_as_written(cli_home: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The lines of docs/configuration.md's "Home-wide limits" (``/data/flow`` a home declared
    with a queue): ``set-home`` records the home's size limits at once, ``status`` answers; the
    spark-submit line is read, not run (a producer job, as the walkthrough runs it): its conf
    gives the home's two count limits and its job is there."""
    [[submit, set_home, status]] = bash_blocks("docs/configuration.md", "Home-wide limits")
    conf = dict(submit[i + 1].split("=", 1) for i, word in enumerate(submit) if word == "--conf")
    limits = conf_settings("events", conf, "home")
    assert (limits["homeStopCount"], limits["homeResumeCount"]) == (
        ("spark.flow.homeStopCount", "100000"), ("spark.flow.homeResumeCount", "60000"))
    assert submit[0] == "spark-submit" and (ROOT / submit[submit.index("--queue") - 1]).is_file()
    for command in (set_home, status):
        assert command[0] == "spark-flow"
        assert main([word.replace("/data/flow", cli_home) for word in command[1:]]) == 0
    assert HomeFlow(cli_home).thresholds() == Thresholds(0, 0, 8 * 1024**3, 6 * 1024**3)
    assert "in force now" in capsys.readouterr().out


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
def test_bad_input_one_line_error_and_nothing_written(cli_home: str, argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", cli_home, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert FlowAdmin(cli_home).commands.latest() == -1


def test_plot_draws_the_history(cli_home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    depths = [0, 3, 6, 7, 4, 1, 0]
    samples = [{"time": start + timedelta(seconds=i), "queue": "orders.eu", "subscription": "default",
                "event": "sample", "depth_count": d, "depth_size": 9 * d, "stop_count": 5, "resume_count": 2,
                "stop_size": 0, "resume_size": 0, "flow_stopped": 2 <= i <= 5, "flow_stopped_count": 1,
                "producers_stopped": False, "detail": None} for i, d in enumerate(depths)]
    append_history(cli_home, samples, "test", 0)
    out = tmp_path / "orders.png"
    assert main(["--home", cli_home, "plot", "orders.eu", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
