"""A queue's run-time settings (``set``, ``unset``, ``stop-producers``), on a real Delta table
written with deltalake (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_flow.records.runtime_settings import RuntimeSettings


@pytest.fixture
def overrides(tmp_path: Path) -> RuntimeSettings:
    return RuntimeSettings(str(tmp_path / "overrides"))


def rows(table: RuntimeSettings) -> dict[str, tuple[str | None, int]]:
    """The table's rows as stored: key -> (value, command id)."""
    return {r["key"]: (r["value"], r["command_id"]) for r in DeltaTable(table.location).to_pyarrow_table().to_pylist()}


def test_no_table_no_settings(overrides: RuntimeSettings) -> None:
    assert overrides.current() == {}
    assert overrides.applied() == -1


def test_apply_sets_values_as_text_by_command(overrides: RuntimeSettings) -> None:
    overrides.apply({"stopCount": 500, "resumeCount": "300"}, 1)
    overrides.apply({"stopCount": "600"}, 2)
    assert overrides.current() == {"stopCount": "600", "resumeCount": "300"}
    assert overrides.applied() == 2


def test_unset_keeps_a_row_without_a_value(overrides: RuntimeSettings) -> None:
    overrides.apply({"stopCount": "500", "resumeCount": "300"}, 1)
    overrides.apply({"stopCount": None}, 2)
    assert overrides.current() == {"resumeCount": "300"}
    assert rows(overrides) == {"stopCount": (None, 2), "resumeCount": ("300", 1)}


def test_an_older_command_never_overwrites_a_newer_one(overrides: RuntimeSettings) -> None:
    overrides.apply({"stopCount": "500"}, 1)
    overrides.apply({"stopCount": None}, 3)
    overrides.apply({"stopCount": "700"}, 2)  # older, applied late (a replayed controller batch)
    overrides.apply({"stopCount": "500"}, 1)
    assert overrides.current() == {}
    assert overrides.applied() == 3
    assert rows(overrides) == {"stopCount": (None, 3)}


def test_a_second_handle_sees_new_settings(overrides: RuntimeSettings) -> None:
    other = RuntimeSettings(overrides.location)  # as a gate in another process has it
    overrides.apply({"producersStopped": "true"}, 1)
    assert other.current() == {"producersStopped": "true"}
    overrides.apply({"producersStopped": "false"}, 2)
    assert (other.current(), other.applied()) == ({"producersStopped": "false"}, 2)


def test_when_each_setting_last_changed(overrides: RuntimeSettings) -> None:
    """How long an operator's stop has held a queue: when its setting was last set."""
    assert overrides.changed_at("producersStopped") is None
    overrides.apply({"producersStopped": "true", "stopCount": "5"}, 1)
    stopped = overrides.changed_at("producersStopped")
    overrides.apply({"stopCount": "6"}, 2)
    assert overrides.changed_at("producersStopped") == stopped
    assert overrides.changed_at("stopCount") > stopped
