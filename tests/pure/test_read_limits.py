"""The flowqueue source's read limits at message positions, decision by decision (no Spark: the
end-to-end runs are in test_source.py)."""

from __future__ import annotations

import math

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

from spark_flow.rules.depth import Commit, Position
from spark_flow.spark.read_limits import ReadLimits


def commits(*sizes: tuple[int, int], first: int = 1) -> list[Commit]:
    """Commits of (count, size) from version ``first`` on."""
    return [Commit(first + i, 0, count, size) for i, (count, size) in enumerate(sizes)]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param(ReadLimits(max_records=5), Position(2), id="rows: 3 + 2"),
        pytest.param(ReadLimits(max_records=4), Position(1, 1), id="rows: 3 + the first of 2"),
        pytest.param(ReadLimits(max_bytes=250), Position(1, 1), id="bytes: 200 + one message of 50"),
        pytest.param(ReadLimits(max_bytes=100), Position(0, 1), id="bytes: one message of 66 of the first commit"),
        pytest.param(ReadLimits(max_records=100, max_bytes=700), Position(3), id="within both"),
        pytest.param(ReadLimits(max_records=4, max_bytes=10_000), Position(1, 1), id="the tighter one decides"),
    ],
)
def test_maxima_take_exactly_that_many_messages(limits: ReadLimits, expected: Position) -> None:
    waiting = commits((3, 200), (2, 100), (4, 400), (1, 50))
    assert limits.end(waiting, 0, 0.0, limits.spark_limit()) == expected


def test_batches_of_maxrecords_over_commits_of_any_size() -> None:
    """Kafka's maxOffsetsPerTrigger: 120 at a time over commits of 1,000, 37 and 500 messages,
    every batch full but the last, each starting where the last ended."""
    waiting, limits = commits((1000, 1000), (37, 37), (500, 500)), ReadLimits(max_records=120)
    sizes, at = [], Position(0)
    while (end := limits.end([c for c in waiting if c.version > at.version], at.index, 0.0, ReadMaxRows(120))):
        sizes.append(sum(c.part(at.index if c.version == at.version + 1 else 0,
                                end.index if c.version == end.version + 1 else c.count).count
                         for c in waiting if at.version < c.version <= end.version + (1 if end.index else 0)))
        at = end
    assert sizes == [120] * 12 + [97]
    assert at == Position(3)


def test_one_message_over_the_byte_limit_comes_alone() -> None:
    limits = ReadLimits(max_bytes=100)
    assert limits.end(commits((2, 1000)), 0, 0.0, ReadMaxBytes(100)) == Position(0, 1)
    assert limits.end(commits((2, 1000)), 1, 0.0, ReadMaxBytes(100)) == Position(1)


def test_commits_without_messages_do_not_count_as_the_first() -> None:
    """A property change or a purge (no messages) before a large commit: the large one still
    comes, so the batch is never empty of messages while messages wait."""
    waiting = commits((0, 0), (10, 1000), (1, 10))
    assert ReadLimits(max_records=5).end(waiting, 0, 0.0, ReadMaxRows(5)) == Position(1, 5)


def test_minimum_waits_at_most_the_delay() -> None:
    limits = ReadLimits(min_records=10, max_trigger_delay=5.0)
    waiting = commits((3, 30), (4, 40))
    assert limits.end(waiting, 0, 4.9, ReadMinRows(10)) is None
    assert limits.end(waiting, 0, 5.0, ReadMinRows(10)) == Position(2)
    assert limits.end(waiting + commits((3, 30), first=3), 0, 0.0, ReadMinRows(10)) == Position(3)
    assert limits.end(waiting, 0, math.inf, ReadMinRows(10)) == Position(2)  # Trigger.AvailableNow: nothing more comes


def test_minimum_then_maximum() -> None:
    """Kafka's order: the minimum decides whether a batch runs, the maximum how far it goes."""
    limits = ReadLimits(max_records=4, min_records=3)
    assert limits.end(commits((1, 0), (1, 0)), 0, 0.0, ReadMaxRows(4)) is None
    assert limits.end(commits((3, 0), (2, 0), (1, 0)), 0, 0.0, ReadMaxRows(4)) == Position(1, 1)


@pytest.mark.parametrize("limits", [ReadLimits(), ReadLimits(max_records=5), ReadLimits(min_records=10)],
                         ids=["no limit", "maxRecordsPerTrigger", "minRecordsPerTrigger"])
def test_commits_without_messages_are_passed_over(limits: ReadLimits) -> None:
    """Delta's source moves past its non-data commits: a property change or a purge after the
    last message read is no reason for the end to stay behind (whatever the limits)."""
    assert limits.end(commits((0, 0), (0, 0), first=4), 0, 0.0, limits.spark_limit()) == Position(5)


def test_all_available_and_nothing_waiting() -> None:
    limits = ReadLimits(max_records=1, min_records=100)
    assert limits.end(commits((3, 0), (2, 0)), 0, 0.0, ReadAllAvailable()) == Position(2)  # Trigger.Once
    assert limits.end([], 0, 0.0, ReadMaxRows(1)) is None


def test_spark_is_given_the_first_limit_set() -> None:
    assert ReadLimits().spark_limit() == ReadAllAvailable()
    assert ReadLimits(max_records=5, max_bytes=9).spark_limit() == ReadMaxRows(5)
    assert ReadLimits(max_bytes=9, min_records=2).spark_limit() == ReadMaxBytes(9)
    assert ReadLimits(min_records=2).spark_limit() == ReadMinRows(2)
