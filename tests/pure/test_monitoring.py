"""The alert rules and the dashboard use only the metrics ``spark-flow serve`` serves. With
``promtool``, a real Prometheus and headless Chromium: tests/processes/test_monitoring.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from spark_flow.ops.metrics import metric_names

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "spark-flow.rules.yml"
DASHBOARD = MONITORING / "spark-flow.dashboard.json"
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "by", "on", "ignoring", "group_left", "group_right", "without",
                "time", "increase", "rate", "and", "or", "unless", "label_values", "bool", "offset"}


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' and its variables'."""
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return queries + [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]


def metrics_used(expression: str) -> set[str]:
    """The metric names an expression reads (identifiers that are not PromQL's own words,
    label names, label values or Grafana variables)."""
    bare = re.sub(r"label_values\((.*),\s*\w+\)", r"\1", expression)  # Grafana's: the series, then a label
    bare = re.sub(r'"[^"]*"', '""', bare)  # label values
    bare = re.sub(r"\{[^}]*\}", "{}", bare)  # label matchers
    bare = re.sub(r"\$\w+|\[[^\]]*\]|\b(?:by|on|without|ignoring)\s*\([^)]*\)", "", bare)  # variables, ranges, groupings
    return {word for word in re.findall(r"[a-zA-Z_:][\w:]*", bare) if word not in PROMQL_WORDS}


def test_rules_and_dashboard_use_only_served_metrics() -> None:
    rules = re.findall(r"^\s*expr: (.*)$", RULES.read_text(), re.M)
    used = {name for expression in [*rules, *dashboard_queries()] for name in metrics_used(expression)}
    assert used - set(metric_names()) == set()
    assert {"spark_flow_depth_messages", "spark_flow_stop_messages", "spark_flow_resume_messages",
            "spark_flow_producers_held", "spark_flow_consumer_stalled"} <= used
