"""The home's registry of queues, on a real Delta table written with deltalake (no Spark)."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from spark_flow.records.home import Registry, control_path


def test_an_empty_home_has_no_queues(tmp_path: Path) -> None:
    assert Registry(str(tmp_path / "home")).queues() == {}


def test_register_lists_queues_by_name(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    registry = Registry(home)
    registry.register("orders", "/data/orders")
    registry.register("events", "/data/events")
    registry.register("orders", "/data/orders")  # again: nothing changes
    assert list(registry.queues().items()) == [("events", "/data/events"), ("orders", "/data/orders")]
    assert registry.location == control_path(home, "queues") == f"{home}/_spark_flow/queues"
    assert DeltaTable(registry.location).to_pyarrow_table().num_rows == 2


def test_register_moves_a_name_to_a_new_path_seen_by_every_handle(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    Registry(home).register("orders", "/data/orders")
    Registry(home).register("orders", "/data/v2/orders")  # another process
    assert Registry(home).queues() == {"orders": "/data/v2/orders"}
