"""The depth plot: the PNG it writes and the points it is drawn from (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spark_flow.ops.plot import Sample, depth_points, plot_depth
from spark_flow.rules.flow_state import Thresholds

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float, depth: int, stopped: bool, **more: object) -> dict[str, object]:
    return {"time": T0 + timedelta(seconds=seconds), "depth_count": depth, "flow_stopped": stopped,
            "stop_count": 5, "resume_count": 2, **more}


@pytest.mark.parametrize("thresholds", [Thresholds(5, 2, 0, 0), None], ids=["fixed", "the samples'"])
def test_plot_depth_writes_a_png(tmp_path: Path, thresholds: Thresholds | None) -> None:
    samples = [Sample(0, 0, False, 5, 2), Sample(1, 6, True, 5, 2), Sample(2, 4, True, 8, 4), Sample(3, 1, False, 8, 4)]
    out = plot_depth(samples, thresholds, tmp_path / "plots" / "q.png", title="q")
    assert out == tmp_path / "plots" / "q.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_depth_points_merge_samples_and_transitions_in_time_order() -> None:
    samples = [at(t, depth, stopped, producers_stopped=manual)  # the controller's, with the operator's stop
               for t, depth, stopped, manual in ((0, 0, False, False), (2, 7, True, False), (4, 3, True, True),
                                                 (6, 0, False, False))]
    transitions = [at(-1, 9, True), at(1, 6, True), at(5, 1, False)]  # the first is before the first sample
    points = depth_points(samples, transitions)
    assert [(p.seconds, p.depth, p.flow_stopped) for p in points] == [
        (0, 0, False), (1, 6, True), (2, 7, True), (4, 3, True),
        (5, 1, True),  # resumed, but an operator's stop still holds the producers
        (6, 0, False)]
    assert {(p.stop_count, p.resume_count) for p in points} == {(5, 2)}


def test_an_age_limited_queue_plots_the_oldest_message_age_on_a_second_axis(tmp_path: Path) -> None:
    """Samples carry the oldest message's age (the controller's) or the age at a transition (the
    queue's history): both become points, drawn against stopAge / resumeAge."""
    ages = {"stop_age": 3.0, "resume_age": 1.0}
    samples = [at(0, 1, False, oldest_message_age_seconds=0.5, **ages),
               at(4, 2, True, oldest_message_age_seconds=4.0, **ages)]
    points = depth_points(samples, [at(3, 1, True, depth_age=3.1, **ages)])
    assert [(p.seconds, p.age, p.stop_age, p.resume_age) for p in points] == [
        (0, 0.5, 3.0, 1.0), (3, 3.1, 3.0, 1.0), (4, 4.0, 3.0, 1.0)]
    plain = plot_depth([Sample(0, 1, False, 5, 2), Sample(4, 2, True, 5, 2)], None, tmp_path / "plain.png")
    aged = plot_depth(points, None, tmp_path / "aged.png")
    assert aged.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert aged.stat().st_size > plain.stat().st_size  # the age line, its thresholds and a second axis


def test_plot_points_take_the_depth_of_each_transition_between_samples() -> None:
    """A stop at depth 400 between two samples at 200 shows in the plot; a manual stop keeps
    producers held on the transition points after it; records older than the first sample are left out."""
    t0 = datetime(2026, 11, 23, tzinfo=UTC)

    def at(seconds: float, depth: int, stopped: bool, **more: object) -> dict[str, object]:
        return {"time": t0 + timedelta(seconds=seconds), "depth_count": depth, "flow_stopped": stopped,
                "stop_count": 300, "resume_count": 150, **more}

    samples = [at(0, 200, False, producers_stopped=False), at(2, 200, True, producers_stopped=False),
               at(4, 100, False, producers_stopped=True)]
    transitions = [at(-5, 999, True), at(1, 400, True), at(5, 0, False)]
    assert depth_points(samples, transitions) == [
        Sample(0.0, 200, False, 300, 150), Sample(1.0, 400, True, 300, 150), Sample(2.0, 200, True, 300, 150),
        Sample(4.0, 100, True, 300, 150), Sample(5.0, 0, True, 300, 150)]
