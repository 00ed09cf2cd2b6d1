"""The pacing rules (issue 48): the drain rate a producer measures from its looks, the rate it is
admitted at (the drain plus the depth's gap to the middle of the band), and shares between the
producers that wrote in the window, by their weights. The mode on real Spark is in tests/session/test_pacing.py."""

from __future__ import annotations

import pytest

from spark_flow.rules.flow_state import Thresholds
from spark_flow.rules.pace import HORIZON, PAYING_AT_MOST, WINDOW, DrainMeter, chunk, target

BAND = Thresholds(stop_count=200, resume_count=100)


def test_the_target_is_the_middle_of_the_band_and_a_write_half_of_it() -> None:
    assert target(BAND) == 150 and chunk(BAND) == 50
    assert chunk(Thresholds(stop_count=10, resume_count=10)) == 1  # a band of nothing: one message at a time


def test_the_drain_is_what_arrived_less_what_the_depth_grew() -> None:
    meter = DrainMeter()
    meter.look(0.0, depth=100, arrived=0, writers=[])
    assert meter.measured().rate is None  # one look measures nothing
    meter.look(2.0, depth=90, arrived=20, writers=[("p", 1, 15)])
    assert meter.measured().rate == pytest.approx(15.0)  # 30 messages left in 2 s


def test_a_stopped_consumer_paces_the_producer_to_the_target_and_no_further() -> None:
    meter = DrainMeter()
    meter.look(0.0, depth=0, arrived=0, writers=[])
    meter.look(2.0, depth=100, arrived=100, writers=[("p", 1, 15)])  # nothing drained
    assert meter.measured().rate == 0.0
    assert meter.measured().pace(BAND, 100, "p").rate == pytest.approx(50 / HORIZON)  # closes the gap to 150
    assert meter.measured().pace(BAND, 150, "p").rate == 0.0
    assert meter.measured().pace(BAND, 190, "p").rate == 0.0  # above the target: waits for the consumer


def test_the_rate_follows_the_drain_at_the_target() -> None:
    meter = DrainMeter()
    for second in range(5):  # the depth stands at 150 while 40 messages a second arrive: 40 drained a second
        meter.look(float(second), depth=150, arrived=40 if second else 0, writers=[("p", 1, 15)] if second else [])
    assert meter.measured().pace(BAND, 150, "p").rate == pytest.approx(40.0)


def test_the_drain_is_measured_over_the_last_window() -> None:
    meter = DrainMeter()
    meter.look(0.0, depth=0, arrived=0, writers=[])
    meter.look(1.0, depth=0, arrived=100, writers=[])  # 100 a second then
    for second in range(2, 2 + int(WINDOW) * 2):
        meter.look(float(second), depth=0, arrived=10, writers=[])  # 10 a second since
    assert meter.measured().rate == pytest.approx(10.0)


def test_a_consumer_that_stops_is_followed_at_once() -> None:
    meter = DrainMeter()
    for second in range(8):  # 40 a second drained...
        meter.look(float(second), depth=150, arrived=40 if second else 0, writers=[])
    for second in range(8, 11):  # ...then nothing
        meter.look(float(second), depth=150 + 40 * (second - 7), arrived=40, writers=[])
    assert meter.measured().rate == 0.0


def test_producers_that_wrote_in_the_window_share_the_rate_equally() -> None:
    meter = DrainMeter()
    meter.look(0.0, depth=150, arrived=0, writers=[])
    meter.look(1.0, depth=150, arrived=60, writers=[("a", 1, 15), ("b", 1, 15), ("b", 1, 15), ("c", 1, 15)])
    pace = meter.measured().pace(BAND, 150, "a")
    assert pace.producers == 3 and pace.share == pytest.approx(pace.rate / 3)
    assert meter.measured().pace(BAND, 150, "d").producers == 4  # a producer about to write counts itself
    for second in range(2, int(WINDOW) + 6):  # a alone writes what the consumer drains: 15 a second
        meter.look(float(second), depth=150, arrived=15, writers=[("a", 1, 15)])
    assert meter.measured().pace(BAND, 150, "a").producers == 1  # b and c paid for theirs 3 s after the window


def test_a_producer_still_paying_for_its_last_write_shares_the_rate_after_the_window() -> None:
    """A light producer of a slow queue waits longer than the window between its writes (12
    messages at a quarter of 2 a second: 24 s): it is one of the queue's producers meanwhile, or
    the heavy one writes as if alone (a run's heavy producer wrote a whole chunk of 50 against
    its 37 so)."""
    meter = DrainMeter()
    meter.look(0.0, depth=150, arrived=0, writers=[])
    meter.look(1.0, depth=150, arrived=14, writers=[("light", 1, 12), ("heavy", 3, 2)])
    for second in range(2, 41):  # the consumer drains 2 a second, the heavy producer writes them
        meter.look(float(second), depth=150, arrived=2, writers=[("heavy", 3, 2)])
        if second == int(WINDOW) + 5:
            assert meter.measured().pace(BAND, 150, "heavy", 3).part == pytest.approx(3 / 4), second
    assert meter.measured().pace(BAND, 150, "heavy", 3).part == 1.0  # paid for by 1 + 10 + 24 s


def test_a_producer_is_forgotten_within_a_minute_of_the_window_when_nothing_drains() -> None:
    meter = DrainMeter()
    meter.look(0.0, depth=150, arrived=0, writers=[])
    meter.look(1.0, depth=200, arrived=50, writers=[("a", 1, 25), ("b", 1, 25)])
    meter.look(1.0 + WINDOW + PAYING_AT_MOST, depth=200, arrived=0, writers=[])
    assert meter.measured().pace(BAND, 200, "a").producers == 2
    meter.look(2.0 + WINDOW + PAYING_AT_MOST, depth=200, arrived=0, writers=[])
    assert meter.measured().pace(BAND, 200, "a").producers == 1


def test_producers_share_the_rate_by_their_weights() -> None:
    meter = DrainMeter()
    meter.look(0.0, depth=150, arrived=0, writers=[])
    meter.look(1.0, depth=150, arrived=60, writers=[("a", 1, 15), ("b", 3, 15)])
    drained = meter.measured()
    assert drained.pace(BAND, 150, "a").share == pytest.approx(drained.pace(BAND, 150, "a").rate / 4)
    assert drained.pace(BAND, 150, "b", 3).share == pytest.approx(drained.pace(BAND, 150, "b", 3).rate * 3 / 4)
    assert drained.pace(BAND, 150, "c", 4).part == pytest.approx(4 / 8)  # about to write: its own weight counts
    meter.look(2.0, depth=150, arrived=0, writers=[("b", 1, 15)])  # b's weight set back to 1 since
    assert meter.measured().pace(BAND, 150, "a").part == pytest.approx(1 / 2)
