"""The flow state machine against the Qpid C++ broker's documented examples, message by message."""

from __future__ import annotations

import pytest

from spark_flow.rules.flow_state import FlowState, Thresholds


def run(thresholds: Thresholds, depths: list[tuple[int, int]], state: FlowState | None = None) -> list[FlowState]:
    """Observe each (count, size) depth in turn; return the state after each."""
    states, state = [], state or FlowState()
    for count, size in depths:
        state = state.observe(thresholds, count, size)
        states.append(state)
    return states


def test_initial_state_is_off() -> None:
    assert FlowState() == FlowState(flow_stopped=False, flow_stopped_count=0)


def test_count_900_500_on_a_1000_queue_message_by_message() -> None:
    thresholds = Thresholds(stop_count=900, resume_count=500)
    filling = run(thresholds, [(n, 0) for n in range(1, 1001)])
    assert all(not s.flow_stopped for s in filling[:900])  # <= 900: OFF
    assert all(s.flow_stopped for s in filling[900:])  # the 901st message turns it ON
    assert filling[-1].flow_stopped_count == 1
    draining = run(thresholds, [(n, 0) for n in range(999, -1, -1)], filling[-1])
    depth_of = dict(zip(range(999, -1, -1), draining, strict=True))
    assert all(depth_of[n].flow_stopped for n in range(500, 1000))  # stays ON down to 500
    assert not depth_of[499].flow_stopped  # OFF under 500
    assert depth_of[0].flow_stopped_count == 1


def test_design_example_stop_7_resume_5() -> None:
    thresholds = Thresholds(stop_count=7, resume_count=5)
    up = run(thresholds, [(n, 0) for n in range(1, 9)])
    assert [s.flow_stopped for s in up] == [False] * 7 + [True]  # ON at the 8th message
    down = run(thresholds, [(n, 0) for n in (7, 6, 5, 4)], up[-1])
    assert [s.flow_stopped for s in down] == [True, True, True, False]  # OFF when 4 remain


def test_combined_count_and_size_4000_8k_stop_3000_6k_resume() -> None:
    thresholds = Thresholds(stop_count=4000, resume_count=3000, stop_size=8 * 1024, resume_size=6 * 1024)
    assert not FlowState().observe(thresholds, 4000, 8192).flow_stopped
    on_by_count = FlowState().observe(thresholds, 4001, 10)
    on_by_size = FlowState().observe(thresholds, 10, 8193)
    assert on_by_count.flow_stopped and on_by_size.flow_stopped
    # Stays ON until BOTH measures are under their resume thresholds.
    assert on_by_count.observe(thresholds, 2999, 6144).flow_stopped  # size not under 6K
    assert on_by_count.observe(thresholds, 3000, 100).flow_stopped  # count not under 3000
    assert not on_by_count.observe(thresholds, 2999, 6143).flow_stopped


def test_size_only_message_by_message() -> None:
    thresholds = Thresholds(stop_size=1000, resume_size=600)
    sizes = [100 * n for n in range(1, 12)]  # 100-byte messages
    up = run(thresholds, [(n, s) for n, s in enumerate(sizes, 1)])
    assert [s.flow_stopped for s in up] == [False] * 10 + [True]  # 1100 > 1000
    down = run(thresholds, [(n, 100 * n) for n in range(10, 4, -1)], up[-1])
    assert [s.flow_stopped for s in down] == [True, True, True, True, True, False]  # 500 < 600


def test_count_measure_ignores_size_when_size_not_configured() -> None:
    thresholds = Thresholds(stop_count=10, resume_count=5)
    assert not FlowState().observe(thresholds, 10, 10**12).flow_stopped
    on = FlowState().observe(thresholds, 11, 0)
    assert not on.observe(thresholds, 4, 10**12).flow_stopped


def test_flow_stopped_count_counts_every_activation() -> None:
    thresholds = Thresholds(stop_count=2, resume_count=1)
    states = run(thresholds, [(3, 0), (5, 0), (0, 0), (3, 0), (2, 0), (1, 0), (3, 0)])
    assert [s.flow_stopped for s in states] == [True, True, False, True, True, True, True]
    assert [s.flow_stopped_count for s in states] == [1, 1, 1, 2, 2, 2, 2]


def test_disabled_thresholds_never_stop_and_release_a_stopped_queue() -> None:
    assert not Thresholds().enabled
    assert run(Thresholds(), [(10**9, 10**12)]) == [FlowState()]
    assert not FlowState(True, 3).observe(Thresholds(), 10**9, 0).flow_stopped


def test_threshold_change_applies_from_the_next_observation() -> None:
    on = FlowState().observe(Thresholds(stop_count=100, resume_count=50), 150, 0)
    assert on.observe(Thresholds(stop_count=100, resume_count=50), 120, 0).flow_stopped
    # A resume threshold raised above the depth releases the queue.
    assert not on.observe(Thresholds(stop_count=200, resume_count=130), 120, 0).flow_stopped


def test_backlog_age_stops_and_all_measures_must_resume() -> None:
    """Pulsar's backlog quota limitTime as a third measure: ON when the oldest message is older
    than stop_age (strictly), OFF only when it is younger than resume_age and the count is under
    its resume too (either stops, all resume)."""
    thresholds = Thresholds(stop_count=100, resume_count=50, stop_age=30.0, resume_age=10.0)
    assert not FlowState().observe(thresholds, 5, 0, 30.0).flow_stopped
    by_age = FlowState().observe(thresholds, 5, 0, 30.5)
    assert by_age == FlowState(True, 1)
    assert by_age.observe(thresholds, 5, 0, 10.0).flow_stopped  # not younger than 10 s
    assert not by_age.observe(thresholds, 5, 0, 9.9).flow_stopped
    by_count = FlowState().observe(thresholds, 101, 0, 0.0)
    assert by_count.observe(thresholds, 60, 0, 0.0).flow_stopped  # young, but 60 is not under 50
    assert not by_count.observe(thresholds, 49, 0, 0.0).flow_stopped
    assert FlowState().observe(Thresholds(stop_count=100, resume_count=50), 5, 0, 10**6) == FlowState()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stop_count": 5, "resume_count": 7}, "resume_count=7 is above stop_count=5"),
        ({"stop_size": 5, "resume_size": 7}, "resume_size=7 is above stop_size=5"),
        ({"stop_count": -1}, r"stop_count=-1 is not valid: allowed is an integer >= 0"),
        ({"stop_count": 1.5}, r"stop_count=1.5 is not valid"),
        ({"stop_age": 5.0, "resume_age": 7.0}, "resume_age=7.0 is above stop_age=5.0"),
        ({"stop_age": -1.0}, r"stop_age=-1.0 is not valid: allowed is a number of seconds >= 0"),
    ],
)
def test_invalid_thresholds(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Thresholds(**kwargs)
