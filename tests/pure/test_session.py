"""The session helper: Delta works end to end, and an existing session is used as it is."""

from __future__ import annotations

from pathlib import Path

from spark_flow.spark.session import DELTA_PACKAGE


def test_spark_defaults_conf_excludes_what_get_spark_excludes() -> None:
    from spark_flow.spark.session import SPARK_PROVIDED

    conf = Path(__file__).parents[2] / "conf" / "spark-defaults.conf"
    lines = dict(line.split(None, 1) for line in conf.read_text().splitlines() if line.startswith("spark."))
    assert lines["spark.jars.packages"].strip() == DELTA_PACKAGE
    assert lines["spark.jars.excludes"].strip().split(",") == list(SPARK_PROVIDED)
