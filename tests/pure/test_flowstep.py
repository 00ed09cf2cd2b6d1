"""The controller's pure step (the flow state machine per queue and subscription, stall
detection, manual stops) and its history rows: no Spark, no running controller."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from deltalake import DeltaTable

from spark_flow.controller.observation import COMMANDS_KEY
from spark_flow.controller.step import ControllerState, Machines, step, step_machines
from spark_flow.records.status import append_history


def observation(**values: object) -> dict[str, object]:
    """An observation of subscription ``default`` of queue ``q`` (stop 5, resume 2)."""
    base: dict[str, object] = {
        "queue": "q", "path": "/q", "subscription": "default", "observed_at": 10_000, "position": 0, "latest": 3,
        "depth_count": 0, "depth_size": 0, "oldest_enqueue": None, "stop_count": 5, "resume_count": 2,
        "stop_size": 0, "resume_size": 0, "producers_stopped": False, "stall_timeout": 0.0,
        "stalled_policy": "flag", "recorded_stopped": False, "recorded_count": 0, "recorded_transition": None,
    }
    return {**base, **values}


def events(rows: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(r["event"], r["detail"]) for r in rows if r["kind"] == "event"]


class TestStep:
    def test_the_oldest_message_older_than_stop_age_turns_flow_on(self) -> None:
        """The age is the observation's time less the oldest message's enqueue time; it resumes
        when a younger message is the oldest (the older ones acknowledged)."""
        ages = {"stop_age": 3.0, "resume_age": 1.0}
        state, rows = step(ControllerState(), observation(depth_count=2, oldest_enqueue=7_000, **ages))
        assert not state.flow_stopped, "3 s old is not older than 3 s"
        state, rows = step(state, observation(depth_count=2, oldest_enqueue=7_000, observed_at=10_500, **ages))
        assert (state.flow_stopped, state.flow_stopped_count) == (True, 1)
        assert events(rows) == [("stopped", "controller")]
        assert (rows[0]["stop_age"], rows[0]["resume_age"]) == (3.0, 1.0)
        state, _ = step(state, observation(depth_count=1, oldest_enqueue=9_600, observed_at=10_600,
                                           recorded_stopped=True, recorded_count=1, **ages))
        assert state.flow_stopped, "1 s old is not younger than 1 s"
        state, rows = step(state, observation(depth_count=1, oldest_enqueue=10_000, observed_at=10_700,
                                              recorded_stopped=True, recorded_count=1, **ages))
        assert (state.flow_stopped, state.flow_stopped_count) == (False, 1)

    def test_depth_above_stop_turns_flow_on_and_counts_it(self) -> None:
        state, rows = step(ControllerState(), observation(depth_count=6))
        assert (state.flow_stopped, state.flow_stopped_count) == (True, 1)
        assert rows[0]["kind"] == "status" and rows[0]["flow_stopped"] and rows[0]["last_transition"] == 10_000
        assert events(rows) == [("stopped", "controller")]

    def test_between_resume_and_stop_nothing_changes(self) -> None:
        state, rows = step(ControllerState(True, 1), observation(depth_count=3, recorded_stopped=True,
                                                                   recorded_count=1, recorded_transition=5))
        assert (state.flow_stopped, state.flow_stopped_count) == (True, 1)
        assert events(rows) == [] and rows[0]["last_transition"] == 5

    def test_gate_recorded_transitions_are_adopted_not_counted_again(self) -> None:
        """A restarted controller (state one batch behind) sees the stop it or a gate recorded."""
        state, rows = step(ControllerState(False, 4), observation(depth_count=6, recorded_stopped=True,
                                                                   recorded_count=5))
        assert (state.flow_stopped, state.flow_stopped_count) == (True, 5)
        assert events(rows) == [("stopped", "recorded by a gate")]
        state, rows = step(ControllerState(False, 4), observation(depth_count=1, recorded_count=5))
        assert events(rows) == [("stopped", "recorded by a gate"), ("resumed", "recorded by a gate")]

    def test_manual_stop_holds_without_flow_stopped_and_keeps_held_since(self) -> None:
        state, rows = step(ControllerState(), observation(producers_stopped=True))
        assert not state.flow_stopped and state.held_since == 10_000
        assert rows[0]["producers_stopped"] and rows[0]["held_since"] == 10_000
        state, rows = step(state, observation(producers_stopped=True, observed_at=12_000))
        assert rows[0]["held_since"] == 10_000
        state, rows = step(state, observation(observed_at=13_000))
        assert rows[0]["held_since"] is None

    def test_no_ack_progress_for_stall_timeout_flags_then_recovers(self) -> None:
        state, _ = step(None, observation(depth_count=3, stall_timeout=2.0))
        state, rows = step(state, observation(depth_count=3, stall_timeout=2.0, observed_at=11_000))
        assert not rows[0]["stalled"]
        state, rows = step(state, observation(depth_count=3, stall_timeout=2.0, observed_at=12_500))
        assert rows[0]["stalled"] and events(rows)[0][0] == "stalled"
        state, rows = step(state, observation(depth_count=1, stall_timeout=2.0, observed_at=13_000, position=2))
        assert not rows[0]["stalled"] and events(rows) == [("recovered", "acks again")]

    def test_stalled_with_skip_policy_is_evicted(self) -> None:
        state, _ = step(None, observation(depth_count=3, stall_timeout=1.0, stalled_policy="skip"))
        state, rows = step(state, observation(depth_count=3, stall_timeout=1.0, stalled_policy="skip",
                                              observed_at=11_000))
        assert rows[0]["event"] == "evict" and [e for e, _ in events(rows)] == ["stalled", "evicted"]
        assert not state.stalled

    def test_an_empty_subscription_is_never_stalled(self) -> None:
        state, _ = step(None, observation(stall_timeout=1.0))
        _, rows = step(state, observation(stall_timeout=1.0, observed_at=60_000))
        assert not rows[0]["stalled"]


class TestMachines:
    """A group of the controller's state: the machines of many subscriptions stepped at once."""

    def test_each_subscription_is_stepped_with_its_newest_observation(self) -> None:
        machines: Machines = {}
        rows = step_machines(machines, [observation(depth_count=6, observed_at=9_000),
                                        observation(depth_count=1, observed_at=10_000),
                                        observation(queue="r", depth_count=6)], 10_000, 60_000)
        assert {(r["queue"], r["flow_stopped"]) for r in rows if r["kind"] == "status"} == {("q", False), ("r", True)}
        assert machines[("r", "default")] == (ControllerState(True, 1, 0, 10_000, held_since=10_000), 10_000)

    def test_a_subscription_not_observed_for_forget_after_is_gone(self) -> None:
        machines: Machines = {}
        step_machines(machines, [observation(), observation(queue="r")], 10_000, 5_000)
        rows = step_machines(machines, [observation(observed_at=14_000)], 14_000, 5_000)
        assert [r["kind"] for r in rows] == ["status"]
        rows = step_machines(machines, [observation(observed_at=15_000)], 15_000, 5_000)
        assert [(r["kind"], r["queue"]) for r in rows] == [("status", "q"), ("gone", "r")]
        assert list(machines) == [("q", "default")]

    def test_commands_come_out_in_the_order_issued_beside_the_steps(self) -> None:
        issued = [observation(subscription=COMMANDS_KEY, command_id=i, command="stop-producers") for i in (7, 3)]
        rows = step_machines({}, [*issued, observation()], 10_000, 60_000)
        assert [(r["kind"], r.get("command_id")) for r in rows] == [("status", None), ("command", 3), ("command", 7)]


def test_replayed_batch_adds_only_transitions_its_first_attempt_missed(tmp_path: Path) -> None:
    def row(event: str, count: int) -> dict[str, object]:
        return {"time": datetime.now(UTC), "queue": "q", "subscription": "default", "event": event,
                "depth_count": 0, "depth_size": 0, "stop_count": 5, "resume_count": 2, "stop_size": 0,
                "resume_size": 0, "flow_stopped": event == "stopped", "flow_stopped_count": count,
                "producers_stopped": False, "detail": None}

    home = str(tmp_path / "home")
    assert append_history(home, [row("sample", 1), row("stopped", 1)], "controller", 7)
    assert not append_history(home, [row("sample", 1), row("stopped", 1), row("resumed", 1)], "controller", 7)
    rows = DeltaTable(str(tmp_path / "home" / "_spark_flow" / "history")).to_pyarrow_table().to_pylist()
    assert sorted((r["event"], r["flow_stopped_count"]) for r in rows) == [("resumed", 1), ("sample", 1),
                                                                          ("stopped", 1)]
