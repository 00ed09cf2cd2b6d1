"""Home-wide limits: the home's settings, flow state and transitions on real Delta tables
written with deltalake (no Spark; the producers held by them run in test_home_limits.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_flow.exceptions import ConfigurationError
from spark_flow.flow.conf_record import record_home_conf
from spark_flow.flow.homeflow import HOME_ROW, HomeFlow
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.home import control_path
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState, Thresholds


def test_a_home_without_limits_reads_nothing_and_records_nothing(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    home = str(tmp_path / "home")
    flow = HomeFlow(home)
    flow.registry.register("gone", str(tmp_path / "no-such-queue"))  # read, it is reported
    status = flow.step()
    assert not status.limited and not status.flow_stopped and status.depth == Depth()
    assert not DeltaTable.is_deltatable(control_path(home, "flow"))
    assert "cannot read queue" not in caplog.text
    FlowAdmin(home).set_home(homeStopCount=10)
    assert flow.step().limited and "cannot read queue 'gone'" in caplog.text


def test_the_home_stops_over_its_stop_and_resumes_under_its_resume_counted_once(tmp_path: Path) -> None:
    """Stop 7 / resume 5, as Qpid's example: ON at 8, still ON at 5, OFF at 4. Two handles (two
    processes) seeing the same crossing count it once, and its transition has one history row."""
    home = str(tmp_path / "home")
    one, two = HomeFlow(home), HomeFlow(home)
    FlowAdmin(home).set_home(homeStopCount=7, homeResumeCount=5)
    assert one.step(Depth(7, 0)).state == FlowState(False, 0)
    assert one.step(Depth(8, 0)).state == FlowState(True, 1)
    assert two.step(Depth(9, 0)).state == FlowState(True, 1)
    assert two.step(Depth(5, 0)).state == FlowState(True, 1)
    assert one.step(Depth(4, 0)).state == FlowState(False, 1)
    assert two.step(Depth(4, 0)).state == FlowState(False, 1)
    assert one.step(Depth(8, 0)).state == FlowState(True, 2)
    rows = one.history.read()
    assert [(r["flow_stopped"], r["flow_stopped_count"], r["depth_count"]) for r in rows] == [
        (True, 1, 8), (False, 1, 4), (True, 2, 8)]
    assert {(r["stop_count"], r["resume_count"], r["subscription"]) for r in rows} == {(7, 5, HOME_ROW)}


def test_a_stopped_home_whose_limits_are_removed_is_resumed_by_the_controller_look(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    admin, flow = FlowAdmin(home), HomeFlow(home)
    admin.set_home(homeStopSize="1k")
    assert flow.step(Depth(1, 2000)).flow_stopped
    admin.unset_home("homeStopSize")
    assert not flow.step().flow_stopped  # a gate: no limit, no look
    assert flow.step(Depth(1, 2000)).state == FlowState(False, 1)  # the controller records the resume
    assert not flow.flow.get(HOME_ROW).flow_stopped


def test_conf_supplies_a_limit_the_home_has_none_recorded_for(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    FlowAdmin(home).set_home(homeStopCount=100)
    flow = HomeFlow(home)
    in_force = record_home_conf(flow, {"spark.flow.homeStopCount": "999", "spark.flow.homeResumeCount": "50",
                                 "spark.flow.stopCount": "10"})
    assert in_force == Thresholds(100, 50)  # the recorded stop stays, the conf's resume fills the gap
    assert HomeFlow(home).thresholds() == Thresholds(100, 50)  # any other process judges the same


def test_a_bad_home_limit_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    admin = FlowAdmin(home)
    with pytest.raises(ConfigurationError, match=r"spark.flow.homeResumeCount='900'.*spark.flow.homeStopCount=500"):
        record_home_conf(HomeFlow(home), {"spark.flow.homeStopCount": "500", "spark.flow.homeResumeCount": "900"})
    with pytest.raises(ConfigurationError, match=r"homeResumeCount='9'.*<= homeStopCount=5"):
        admin.set_home(homeStopCount=5, homeResumeCount=9)
    with pytest.raises(ConfigurationError, match=r"homeStopCount='-3'"):
        admin.set_home(homeStopCount=-3)
    with pytest.raises(ConfigurationError, match=r"stopCount=.*a home setting: homeStopCount"):
        admin.set_home(stopCount=3)
    assert not DeltaTable.is_deltatable(control_path(home, "settings"))
    assert admin.commands.read() == []
    admin.set_home(homeStopCount=5)
    with pytest.raises(ConfigurationError, match=r"homeResumeCount='9'.*<= homeStopCount=5"):
        admin.set_home(homeResumeCount=9)  # checked with what is recorded
    assert HomeFlow(home).thresholds() == Thresholds(5, 5)
