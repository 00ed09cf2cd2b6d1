"""A producer's publish rate, decision by decision (no Spark: the sink's pacing is in test_sink.py,
the rate over a run in bench/publish_rate.py)."""

from __future__ import annotations

import math

import pytest

from spark_flow.rules.publish_rate import PublishRateLimiter


@pytest.mark.parametrize(
    ("msg_rate", "byte_rate", "count", "size", "window"),
    [
        pytest.param(0, 0, 1000, 10**6, math.inf, id="no quota: one write"),
        pytest.param(100, 0, 1000, 10**6, 100, id="messages: one second of them"),
        pytest.param(0, 1024, 6, 3072, 2, id="bytes: one second at the mean message size"),
        pytest.param(100, 1024, 6, 3072, 2, id="the tighter quota decides"),
        pytest.param(0, 1024, 2, 10_000, 1, id="a message above a second of bytes goes alone"),
        pytest.param(0, 1024, 5, 0, math.inf, id="messages of no bytes: no byte window"),
    ],
)
def test_a_write_takes_at_most_one_second_of_quota(msg_rate: int, byte_rate: int, count: int, size: int,
                                                   window: float) -> None:
    assert PublishRateLimiter(msg_rate, byte_rate).window(count, size) == window


def test_a_write_costs_its_share_of_the_tighter_quota() -> None:
    limiter = PublishRateLimiter(100, 1024)
    assert limiter.cost(50, 100) == 0.5
    assert limiter.cost(1, 2048) == 2.0
    assert PublishRateLimiter().cost(10**6, 10**9) == 0.0


def test_each_write_waits_for_the_one_before_it_to_be_paid() -> None:
    """The first write goes at once; the next one waits the first one's cost, less the time
    since it started (the waits are the mechanism, so they are at least that)."""
    limiter = PublishRateLimiter(msg_rate=20)
    assert limiter.acquire(2, 0) == (0.0, True)
    waited, go = limiter.acquire(2, 0)
    assert go and waited > 0
    assert not PublishRateLimiter().limited and PublishRateLimiter().acquire(10**6, 0) == (0.0, True)


def test_a_stop_ends_the_wait_and_charges_nothing() -> None:
    limiter = PublishRateLimiter(msg_rate=1)
    limiter.acquire(100, 0)  # 100 seconds of quota
    waited, go = limiter.acquire(1, 0, is_active=lambda: False)
    assert not go and waited < 100
