"""The quickstart notebook, and what it says it does: run as a script in a classic session
(tests/session/test_notebook.py) and as a Spark Connect client (tests/processes/test_notebook.py)."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from spark_flow import FlowAdmin
from spark_flow.flow.homeflow import open_home
from support.processes import ROOT

NOTEBOOK = ROOT / "notebooks" / "flow_control_quickstart.py"


def assert_notebook_did_what_it_says(base: Path) -> None:
    """Every order produced is delivered once; the producer was held, within its capacity bound,
    resumed under the new thresholds, held by the home's limit and released when it was removed,
    stopped and started by the operator; the queue drained; the plot was drawn."""
    produced = DeltaTable(str(base / "queues" / "orders")).to_pyarrow_table(columns=["order_id"])
    delivered = DeltaTable(str(base / "out" / "orders")).to_pyarrow_table(columns=["order_id"])
    ids = delivered.column("order_id").to_pylist()
    assert sorted(ids) == sorted(produced.column("order_id").to_pylist()) and len(ids) == len(set(ids)) > 150
    admin = FlowAdmin(str(base / "flow"))
    final = admin.status("orders").to_dict("records")[0]
    assert final["flow_stopped_count"] >= 1 and final["stop_count"] == 400 and final["depth_count"] == 0
    assert not final["producers_stopped"] and not final["flow_stopped"]
    history = admin.history("orders")
    bound = {150: 150 + 60, 400: 400 + 60}  # stop + the producer's capacity
    assert all(r["depth_count"] <= bound[r["stop_count"]] for r in history if r["event"] == "sample")
    home = open_home(str(base / "flow")).history.read()  # held by the home's limit, resumed when it was removed
    assert [(r["flow_stopped"], r["flow_stopped_count"]) for r in home] == [(True, 1), (False, 1)]
    assert home[0]["depth_count"] > 100
    commands = [r["detail"] for r in history if r["event"] == "command"]
    assert [c.split(": ")[1].split()[0] for c in commands] == ["set", "stop-producers", "start-producers"]
    assert (base / "orders-depth.png").read_bytes()[:4] == b"\x89PNG"
