"""Configuration: Qpid default thresholds and rounding, precedence, units, and every bad value."""

from __future__ import annotations

from fractions import Fraction

import pytest
from pyspark.sql import SparkSession

from spark_flow.config import (
    check_options,
    default_thresholds,
    parse_duration,
    parse_size,
    pattern_matches,
    resolve,
    session_flow_conf,
)
from spark_flow.exceptions import ConfigurationError, UnknownKeyError
from spark_flow.state import FlowState, Thresholds


def test_qpid_default_rounding_80_70() -> None:
    t = default_thresholds(0, 2_950_001, Fraction(80), Fraction(70))
    assert (t.stop_size, t.resume_size) == (2_360_001, 2_065_000)


def test_qpid_default_rounding_97_73() -> None:
    t = default_thresholds(0, 2_950_001, Fraction(97), Fraction(73))
    assert (t.stop_size, t.resume_size) == (2_861_501, 2_153_500)


def test_defaults_from_max_with_spark_conf_percentages() -> None:
    conf = {"spark.flow.defaultStopThreshold": "90", "spark.flow.defaultResumeThreshold": "75"}
    cfg = resolve("q", table_properties={"flow.maxSize": "10000"}, conf=conf)
    assert cfg.thresholds == Thresholds(stop_size=9000, resume_size=7500)


def test_default_80_70_of_a_1000_message_queue() -> None:
    cfg = resolve("q", table_properties={"qpid.max_count": "1000"})
    assert cfg.thresholds == Thresholds(stop_count=800, resume_count=700)


def test_both_percentages_zero_disable_defaults_but_not_explicit_thresholds() -> None:
    conf = {"spark.flow.defaultStopThreshold": "0", "spark.flow.defaultResumeThreshold": "0"}
    assert not resolve("q", table_properties={"flow.maxCount": "1000"}, conf=conf).thresholds.enabled
    explicit = resolve("q", table_properties={"flow.maxCount": "1000", "flow.stopCount": "900", "flow.resumeCount": "500"}, conf=conf)
    assert explicit.thresholds == Thresholds(stop_count=900, resume_count=500)


def test_no_max_and_no_thresholds_means_no_flow_control() -> None:
    assert not resolve("q").thresholds.enabled


def test_explicit_900_500_override_the_defaults_of_a_1000_queue() -> None:
    props = {"qpid.max_count": "1000", "qpid.flow_stop_count": "900", "qpid.flow_resume_count": "500"}
    cfg = resolve("q", table_properties=props)
    assert cfg.thresholds == Thresholds(stop_count=900, resume_count=500)
    state = FlowState()
    for depth in range(1, 902):
        state = state.observe(cfg.thresholds, depth, 0)
        assert state.flow_stopped == (depth > 900)


def test_explicit_stop_on_one_measure_disables_the_other_default() -> None:
    # As Qpid: a user-given stop threshold means no default thresholds at all.
    cfg = resolve("q", table_properties={"flow.maxCount": "1000", "flow.maxSize": "10k", "flow.stopSize": "8k"})
    assert cfg.thresholds == Thresholds(stop_size=8192, resume_size=8192)


def test_qpid_combined_example_4000_8k_3000_6k() -> None:
    props = {
        "qpid.max_count": "5000", "qpid.max_size": "10K",
        "qpid.flow_stop_count": "4000", "qpid.flow_stop_size": "8K",
        "qpid.flow_resume_count": "3000", "qpid.flow_resume_size": "6K",
    }
    assert resolve("q", table_properties=props).thresholds == Thresholds(4000, 3000, 8192, 6144)


def test_stop_count_and_size_both_zero_disable_the_queue() -> None:
    props = {"flow.maxCount": "1000", "flow.stopCount": "0", "flow.stopSize": "0"}
    assert not resolve("q", table_properties=props).thresholds.enabled


def test_resume_defaults_to_stop() -> None:
    assert resolve("q", options={"stopCount": 10}).thresholds == Thresholds(stop_count=10, resume_count=10)


def test_precedence_option_over_property_over_pattern_over_conf_over_default() -> None:
    conf = {"spark.flow.stopCount": "100", "spark.flow.queues.events.>.stopCount": "200"}
    props = {"flow.stopCount": "300"}
    assert resolve("other", conf=conf).thresholds.stop_count == 100
    assert resolve("events.orders", conf=conf).thresholds.stop_count == 200
    assert resolve("events.orders", conf=conf, table_properties=props).thresholds.stop_count == 300
    cfg = resolve("events.orders", conf=conf, table_properties=props, options={"stopCount": "400"})
    assert cfg.thresholds.stop_count == 400
    assert cfg.origins["stopCount"] == "stopCount"
    assert resolve("q").capacity == 10_000


def test_more_literal_pattern_wins() -> None:
    conf = {"spark.flow.queues.events.>.capacity": "5", "spark.flow.queues.events.orders.capacity": "7"}
    assert resolve("events.orders", conf=conf).capacity == 7
    assert resolve("events.clicks", conf=conf).capacity == 5


@pytest.mark.parametrize(
    ("pattern", "queue", "matches"),
    [
        ("events.>", "events.orders", True),
        ("events.>", "events.orders.eu", True),
        ("events.>", "events", False),
        ("events.*", "events.orders", True),
        ("events.*", "events.orders.eu", False),
        ("*.orders", "events.orders", True),
        ("events.orders", "events.orders", True),
        ("events.orders", "events.clicks", False),
    ],
)
def test_activemq_wildcards(pattern: str, queue: str, matches: bool) -> None:
    assert pattern_matches(pattern, queue) is matches


def test_producer_flow_control_false_by_pattern_and_ring_disable_thresholds() -> None:
    conf = {"spark.flow.stopCount": "10", "spark.flow.queues.FOO.>.producerFlowControl": "false"}
    assert not resolve("FOO.BAR", conf=conf).thresholds.enabled
    assert resolve("BAR", conf=conf).thresholds.enabled
    ring = resolve("q", table_properties={"flow.policy": "ring", "flow.maxCount": "10"})
    assert ring.policy == "ring" and not ring.thresholds.enabled and ring.max_count == 10


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("8192", 8192), ("8k", 8192), ("8K", 8192), ("10 MB", 10 * 1024**2), ("512 KB", 512 * 1024),
     ("1.5k", 1536), ("2g", 2 * 1024**3), ("3 b", 3), (" 7 ", 7), (42, 42)],
)
def test_sizes_with_units(text: object, size: int) -> None:
    assert parse_size("spark.flow.stopSize", text) == size


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("5s", 5.0), ("2 min", 120.0), ("1h", 3600.0), ("1500", 1.5), ("0.5s", 0.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration("spark.flow.rejectTimeout", text) == pytest.approx(seconds)


BAD_VALUES = [
    ("spark.flow.stopCount", "abc", "a whole number >= 0"),
    ("spark.flow.stopCount", "-5", "a whole number >= 0"),
    ("spark.flow.stopCount", "1.5", "a whole number >= 0"),
    ("spark.flow.maxCount", "ten", "a whole number >= 0"),
    ("spark.flow.stopSize", "10 parsecs", "with a unit: 8k, 10 MB"),
    ("spark.flow.stopSize", "-8k", "with a unit"),
    ("spark.flow.stopSize", "0.3b", "a whole number of bytes"),
    ("spark.flow.defaultStopThreshold", "101", "a percentage from 0 to 100"),
    ("spark.flow.defaultResumeThreshold", "-1", "a percentage from 0 to 100"),
    ("spark.flow.defaultStopThreshold", "lots", "a percentage from 0 to 100"),
    ("spark.flow.capacity", "0", "a whole number >= 1"),
    ("spark.flow.capacity", "-3", "a whole number >= 1"),
    ("spark.flow.policy", "drop-newest", "one of flow, reject, reject-after, ring, ring-strict"),
    ("spark.flow.rejectTimeout", "soon", "a duration such as 500ms"),
    ("spark.flow.pollInterval", "0s", "above 0"),
    ("spark.flow.producerFlowControl", "maybe", "true or false"),
]


@pytest.mark.parametrize(("key", "value", "allowed"), BAD_VALUES)
def test_bad_conf_values_name_key_value_and_allowed(key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigurationError, match=allowed) as error:
        resolve("q", conf={key: value})
    assert isinstance(error.value, ValueError)
    assert error.value.key == key and error.value.value == value
    assert key in str(error.value) and repr(value) in str(error.value)


def test_bad_table_property_names_the_property() -> None:
    with pytest.raises(ConfigurationError, match=r"qpid.flow_stop_count='x'"):
        resolve("q", table_properties={"qpid.flow_stop_count": "x"})


@pytest.mark.parametrize(
    ("layer", "key", "closest"),
    [
        ("conf", "spark.flow.stopCuont", "spark.flow.stopCount"),
        ("conf", "spark.flow.resume_size", "spark.flow.resumeSize"),
        ("conf", "spark.flow.queues.events.>.capacty", "spark.flow.queues.events.>.capacity"),
        ("table_properties", "flow.maxcount", "flow.maxCount"),
        ("table_properties", "qpid.flow_stop_cnt", "qpid.flow_stop_count"),
        ("options", "pollIntervall", "pollInterval"),
    ],
)
def test_unknown_keys_name_the_closest_valid_key(layer: str, key: str, closest: str) -> None:
    with pytest.raises(UnknownKeyError, match=f"Did you mean '{closest}'") as error:
        resolve("q", **{layer: {key: "1"}})
    assert error.value.closest == closest and error.value.key == key


def test_other_spark_conf_and_table_properties_are_ignored() -> None:
    cfg = resolve("q", conf={"spark.sql.shuffle.partitions": "2"}, table_properties={"delta.appendOnly": "true"})
    assert cfg.policy == "flow"


@pytest.mark.parametrize(
    ("settings", "keys"),
    [
        ({"options": {"stopCount": "5", "resumeCount": "7"}}, ("resumeCount", "stopCount=5")),
        ({"table_properties": {"flow.stopSize": "1k", "flow.resumeSize": "2k"}}, ("flow.resumeSize", "flow.stopSize=1024")),
        ({"conf": {"spark.flow.stopCount": "5"}, "table_properties": {"qpid.flow_resume_count": "6"}},
         ("qpid.flow_resume_count", "spark.flow.stopCount=5")),
        ({"conf": {"spark.flow.defaultStopThreshold": "60", "spark.flow.defaultResumeThreshold": "70"}},
         ("spark.flow.defaultResumeThreshold", "spark.flow.defaultStopThreshold=60")),
    ],
)
def test_resume_above_stop_names_both_keys(settings: dict, keys: tuple[str, str]) -> None:
    with pytest.raises(ConfigurationError) as error:
        resolve("q", **settings)
    message = str(error.value)
    assert all(k in message for k in keys), message


def test_check_options_splits_own_settings_and_conf_case_insensitively() -> None:
    own, settings, conf = check_options(
        {"queue": "/q", "maxrecordspertrigger": "5", "stopcount": "3", "spark.flow.capacity": "9"},
        ["queue", "maxRecordsPerTrigger"],
    )
    assert own == {"queue": "/q", "maxRecordsPerTrigger": "5"}
    assert settings == {"stopCount": "3"}
    assert conf == {"spark.flow.capacity": "9"}
    with pytest.raises(UnknownKeyError, match="Did you mean 'maxRecordsPerTrigger'"):
        check_options({"maxRecordPerTrigger": "5"}, ["queue", "maxRecordsPerTrigger"])


def test_session_flow_conf_reads_exactly_the_spark_flow_keys_set_now(spark: SparkSession) -> None:
    """The sink reads the session's ``spark.flow.*`` conf on every batch, so a value set at
    run time applies from the next one; values keep their commas and equal signs."""
    keys = {"spark.flow.stopCount": "7", "spark.flow.queues.events.>.resumeSize": "a=1, b=2",
            "spark.flowing": "not ours"}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        conf = session_flow_conf(spark)
        assert conf == {k: v for k, v in spark.conf.getAll.items() if k.startswith("spark.flow.")}
        assert conf["spark.flow.stopCount"] == "7"
        assert conf["spark.flow.queues.events.>.resumeSize"] == "a=1, b=2"
        assert "spark.flowing" not in conf
        spark.conf.set("spark.flow.stopCount", "8")
        assert session_flow_conf(spark)["spark.flow.stopCount"] == "8"
    finally:
        for key in keys:
            spark.conf.unset(key)
    assert not set(keys) & set(session_flow_conf(spark))
