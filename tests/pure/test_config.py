"""Configuration: Qpid's threshold rules, queue settings vs producer settings, units, and every bad value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import pytest

from spark_flow.exceptions import ConfigurationError, QueueSettingError, UnknownKeyError
from spark_flow.rules.flow_state import FlowState, Thresholds
from spark_flow.rules.keys import check_conf, conf_settings, pattern_matches, split_options
from spark_flow.rules.settings import (
    ProducerSettings,
    QueueSettings,
    default_thresholds,
    home_thresholds,
    producer_settings,
    queue_settings,
)
from spark_flow.rules.units import parse_duration, parse_size


def recorded(queue: str, conf: Mapping[str, Any]) -> QueueSettings:
    """The settings of a new queue declared with this Spark conf (what the conf records)."""
    return queue_settings(queue, dict(conf_settings(queue, conf, "queue").values()))


def test_qpid_default_rounding_80_70() -> None:
    t = default_thresholds(0, 2_950_001, Fraction(80), Fraction(70))
    assert (t.stop_size, t.resume_size) == (2_360_001, 2_065_000)


def test_qpid_default_rounding_97_73() -> None:
    t = default_thresholds(0, 2_950_001, Fraction(97), Fraction(73))
    assert (t.stop_size, t.resume_size) == (2_861_501, 2_153_500)


@pytest.mark.parametrize(("max_count", "stop", "resume"), [(3, 2, 2), (1, 1, 1), (10, 8, 7), (7, 6, 4), (2, 2, 1)])
def test_qpid_stop_rounds_half_up_and_resume_down(max_count: int, stop: int, resume: int) -> None:
    """stop = max x 80% rounded half up (2.4 -> 2, 5.6 -> 6, 1.6 -> 2), resume = max x 70% rounded
    down, and a resume of 0 means the stop: a queue of max 1 resumes when empty, not never."""
    settings = queue_settings("q", {"flow.maxCount": str(max_count)})
    assert (settings.thresholds.stop_count, settings.thresholds.resume_count) == (stop, resume)


def test_a_resume_of_zero_never_holds_a_producer_at_depth_zero() -> None:
    for props in ({"flow.maxCount": "1"}, {"flow.maxCount": "100", "flow.defaultResumeThreshold": "0"},
                  {"flow.stopCount": "5", "flow.resumeCount": "0"}):
        thresholds = queue_settings("q", props).thresholds
        state = FlowState().observe(thresholds, thresholds.stop_count + 1, 0)
        assert state.flow_stopped, props
        assert not state.observe(thresholds, 0, 0).flow_stopped, props


def test_defaults_from_max_with_recorded_percentages() -> None:
    props = {"flow.maxSize": "10000", "flow.defaultStopThreshold": "90", "flow.defaultResumeThreshold": "75"}
    assert queue_settings("q", props).thresholds == Thresholds(stop_size=9000, resume_size=7500)


def test_default_80_70_of_a_1000_message_queue() -> None:
    assert queue_settings("q", {"qpid.max_count": "1000"}).thresholds == Thresholds(stop_count=800, resume_count=700)


def test_both_percentages_zero_disable_defaults_but_not_explicit_thresholds() -> None:
    zero = {"flow.defaultStopThreshold": "0", "flow.defaultResumeThreshold": "0"}
    assert not queue_settings("q", {"flow.maxCount": "1000", **zero}).thresholds.enabled
    explicit = queue_settings("q", {"flow.maxCount": "1000", "flow.stopCount": "900", "flow.resumeCount": "500", **zero})
    assert explicit.thresholds == Thresholds(stop_count=900, resume_count=500)


def test_no_max_and_no_thresholds_means_no_flow_control() -> None:
    assert not queue_settings("q").thresholds.enabled


def test_explicit_900_500_override_the_defaults_of_a_1000_queue() -> None:
    props = {"qpid.max_count": "1000", "qpid.flow_stop_count": "900", "qpid.flow_resume_count": "500"}
    settings = queue_settings("q", props)
    assert settings.thresholds == Thresholds(stop_count=900, resume_count=500)
    state = FlowState()
    for depth in range(1, 902):
        state = state.observe(settings.thresholds, depth, 0)
        assert state.flow_stopped == (depth > 900)


def test_an_explicit_threshold_replaces_its_own_default_only() -> None:
    """Qpid: the defaults fill every threshold, then each explicit one replaces its own value:
    max 1000 at 80/70 with stopCount 900 is stop 900, resume 700; an explicit stopSize keeps
    the count defaults."""
    assert queue_settings("q", {"flow.maxCount": "1000", "flow.stopCount": "900"}).thresholds == Thresholds(900, 700)
    both = queue_settings("q", {"flow.maxCount": "1000", "flow.maxSize": "10k", "flow.stopSize": "8k"})
    assert both.thresholds == Thresholds(800, 700, 8192, 7168)


def test_qpid_combined_example_4000_8k_3000_6k() -> None:
    props = {
        "qpid.max_count": "5000", "qpid.max_size": "10K",
        "qpid.flow_stop_count": "4000", "qpid.flow_stop_size": "8K",
        "qpid.flow_resume_count": "3000", "qpid.flow_resume_size": "6K",
    }
    assert queue_settings("q", props).thresholds == Thresholds(4000, 3000, 8192, 6144)


def test_stop_count_and_size_both_zero_disable_the_queue() -> None:
    props = {"flow.maxCount": "1000", "flow.stopCount": "0", "flow.stopSize": "0"}
    assert not queue_settings("q", props).thresholds.enabled


def test_resume_defaults_to_stop() -> None:
    assert queue_settings("q", {"flow.stopCount": "10"}).thresholds == Thresholds(stop_count=10, resume_count=10)


def test_backlog_age_thresholds_are_durations_with_no_default() -> None:
    """stopAge / resumeAge as Spark durations (a plain number is milliseconds); a resume of 0
    means the stop; the maxima and default percentages give no age threshold."""
    assert queue_settings("q", {"flow.stopAge": "2 min", "flow.resumeAge": "30s"}).thresholds == Thresholds(
        stop_age=120.0, resume_age=30.0)
    assert queue_settings("q", {"flow.stopAge": "1500"}).thresholds == Thresholds(stop_age=1.5, resume_age=1.5)
    with_max = queue_settings("q", {"flow.maxCount": "1000", "flow.stopAge": "1h"}).thresholds
    assert with_max == Thresholds(800, 700, stop_age=3600.0, resume_age=3600.0)
    assert not queue_settings("q", {"flow.stopAge": "0", "flow.resumeAge": "10s"}).thresholds.enabled
    assert queue_settings("q", {"flow.stopAge": "1s"}).thresholds.enabled


@pytest.mark.parametrize("value", ["-5s", "soon", "5 parsecs", "true"])
def test_a_bad_age_names_the_key_the_value_and_what_is_allowed(value: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"flow.stopAge={value!r} is not valid: allowed is a "
                                                           "duration such as 500ms, 5s, 2min, 1h")):
        queue_settings("q", {"flow.stopAge": value})


def test_a_stop_above_the_max_names_both_keys() -> None:
    with pytest.raises(ConfigurationError, match=r"flow.stopCount='200'.*<= flow.maxCount=100"):
        queue_settings("q", {"flow.maxCount": "100", "flow.stopCount": "200"})


def test_a_default_resume_above_an_explicit_stop_says_it_is_the_default() -> None:
    with pytest.raises(ConfigurationError, match=r"resumeCount \(default\)='700'.*<= flow.stopCount=500"):
        queue_settings("q", {"flow.maxCount": "1000", "flow.stopCount": "500"})


@pytest.mark.parametrize("policy", ["ring", "ring-strict"])
def test_a_ring_queue_needs_a_max(policy: str) -> None:
    with pytest.raises(ConfigurationError, match=f"flow.policy='{policy}'.*maxCount or maxSize"):
        queue_settings("q", {"flow.policy": policy})


def test_run_time_settings_rank_over_table_properties() -> None:
    settings = queue_settings("q", {"flow.stopCount": "500", "flow.resumeCount": "300"}, {"stopCount": "800"})
    assert settings.thresholds == Thresholds(800, 300)
    assert settings.origins["stopCount"] == "stopCount" and settings.origins["resumeCount"] == "flow.resumeCount"


def test_conf_gives_queue_settings_patterns_over_global_and_defaults_are_not_given() -> None:
    conf = {"spark.flow.stopCount": "100", "spark.flow.queues.events.>.stopCount": "200", "spark.flow.capacity": "5",
            "spark.sql.shuffle.partitions": "2"}
    assert conf_settings("other", conf, "queue") == {"stopCount": ("spark.flow.stopCount", "100")}
    assert conf_settings("events.orders", conf, "queue") == {"stopCount": ("spark.flow.queues.events.>.stopCount", "200")}
    assert conf_settings("events.orders", conf, "producer") == {"capacity": ("spark.flow.capacity", "5")}
    assert recorded("other", conf).thresholds.stop_count == 100
    assert recorded("events.orders", conf).thresholds.stop_count == 200


def test_producer_settings_options_over_patterns_over_conf_over_defaults() -> None:
    conf = {"spark.flow.capacity": "5", "spark.flow.queues.events.>.capacity": "7", "spark.flow.onFull": "reject"}
    assert producer_settings("other", conf=conf) == ProducerSettings(capacity=5, on_full="reject")
    assert producer_settings("events.a", conf=conf).capacity == 7
    assert producer_settings("events.a", {"capacity": 9}, conf).capacity == 9
    assert producer_settings("q") == ProducerSettings()


def test_publish_rates_are_producer_settings_given_like_the_others() -> None:
    """Pulsar's msgPublishRate / bytePublishRate: no limit by default, sizes with units
    (1m = 1 MiB a second), options over patterns over ``spark.flow.<key>``."""
    conf = {"spark.flow.msgPublishRate": "100", "spark.flow.queues.events.>.bytePublishRate": "1m"}
    assert (producer_settings("q").msg_publish_rate, producer_settings("q").byte_publish_rate) == (0, 0)
    assert producer_settings("other", conf=conf) == ProducerSettings(msg_publish_rate=100)
    assert producer_settings("events.a", conf=conf) == ProducerSettings(msg_publish_rate=100, byte_publish_rate=2**20)
    assert producer_settings("events.a", {"msgPublishRate": 0, "bytePublishRate": "64k"}, conf) == ProducerSettings(
        byte_publish_rate=65536)


@pytest.mark.parametrize("key", ["stopCount", "resumeSize", "maxCount", "policy", "producerFlowControl"])
def test_a_queue_setting_as_a_query_option_says_where_it_belongs(key: str) -> None:
    with pytest.raises(QueueSettingError, match=f"{key} is a queue setting.*spark-flow set"):
        producer_settings("q", {key: "1"})


def test_reject_is_a_producer_behaviour_not_a_queue_policy() -> None:
    with pytest.raises(ConfigurationError, match=r"one of flow, ring, ring-strict.*onFull=reject"):
        queue_settings("q", {"flow.policy": "reject"})
    assert producer_settings("q", {"onFull": "reject-after", "rejectTimeout": "2s"}).reject_timeout == 2.0


def test_more_literal_pattern_wins() -> None:
    conf = {"spark.flow.queues.events.>.capacity": "5", "spark.flow.queues.events.orders.capacity": "7"}
    assert producer_settings("events.orders", conf=conf).capacity == 7
    assert producer_settings("events.clicks", conf=conf).capacity == 5


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
    assert not recorded("FOO.BAR", conf).thresholds.enabled
    assert recorded("BAR", conf).thresholds.enabled
    ring = queue_settings("q", {"flow.policy": "ring", "flow.maxCount": "10"})
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
    ("spark.flow.policy", "drop-newest", "one of flow, ring, ring-strict"),
    ("spark.flow.onFull", "wait", "one of hold, reject, reject-after"),
    ("spark.flow.rejectTimeout", "soon", "a duration such as 500ms"),
    ("spark.flow.pollInterval", "0s", "above 0"),
    ("spark.flow.producerFlowControl", "maybe", "true or false"),
]


@pytest.mark.parametrize(("key", "value", "allowed"), BAD_VALUES)
def test_bad_conf_values_name_key_value_and_allowed(key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigurationError, match=allowed) as error:
        check_conf({key: value})
    assert isinstance(error.value, ValueError)
    assert error.value.key == key and error.value.value == value
    assert key in str(error.value) and repr(value) in str(error.value)


def test_bad_table_property_names_the_property() -> None:
    with pytest.raises(ConfigurationError, match=r"qpid.flow_stop_count='x'"):
        queue_settings("q", {"qpid.flow_stop_count": "x"})


@pytest.mark.parametrize(
    ("where", "key", "closest"),
    [
        ("conf", "spark.flow.stopCuont", "spark.flow.stopCount"),
        ("conf", "spark.flow.resume_size", "spark.flow.resumeSize"),
        ("conf", "spark.flow.queues.events.>.capacty", "spark.flow.queues.events.>.capacity"),
        ("properties", "flow.maxCont", "flow.maxCount"),
        ("properties", "qpid.flow_stop_cnt", "qpid.flow_stop_count"),
        ("options", "pollIntervall", "pollInterval"),
    ],
)
def test_unknown_keys_name_the_closest_valid_key(where: str, key: str, closest: str) -> None:
    calls = {"conf": lambda: check_conf({key: "1"}), "properties": lambda: queue_settings("q", {key: "1"}),
             "options": lambda: producer_settings("q", {key: "1"})}
    with pytest.raises(UnknownKeyError, match=f"Did you mean '{closest}'") as error:
        calls[where]()
    assert error.value.closest == closest and error.value.key == key


def test_every_spelling_of_a_key_matches_whatever_its_case() -> None:
    """One spelling table for every place a key is given: Spark lower-cases data source options."""
    assert queue_settings("q", {"flow.maxcount": "10", "QPID.FLOW_STOP_COUNT": "8", "resumecount": "4"}).thresholds \
        == Thresholds(8, 4)
    assert conf_settings("q", {"spark.flow.STOPCOUNT": "9"}, "queue") == {"stopCount": ("spark.flow.STOPCOUNT", "9")}
    assert producer_settings("q", {"CAPACITY": "3"}).capacity == 3


def test_other_spark_conf_and_table_properties_are_ignored() -> None:
    check_conf({"spark.sql.shuffle.partitions": "2"})
    assert queue_settings("q", {"delta.appendOnly": "true"}).policy == "flow"


@pytest.mark.parametrize(
    ("layers", "keys"),
    [
        (({"flow.stopSize": "1k", "flow.resumeSize": "2k"},), ("flow.resumeSize", "flow.stopSize=1024")),
        (({"spark.flow.stopCount": "5"}, {"qpid.flow_resume_count": "6"}), ("qpid.flow_resume_count", "spark.flow.stopCount=5")),
        (({"flow.stopCount": "5", "flow.resumeCount": "3"}, {"resumeCount": "7"}), ("resumeCount", "flow.stopCount=5")),
        (({"flow.defaultStopThreshold": "60", "flow.defaultResumeThreshold": "70"},),
         ("flow.defaultResumeThreshold", "flow.defaultStopThreshold=60")),
        (({"flow.stopAge": "30s"}, {"resumeAge": "5 min"}), ("resumeAge='300s'", "flow.stopAge=30s")),
    ],
)
def test_resume_above_stop_names_both_keys(layers: tuple, keys: tuple[str, str]) -> None:
    with pytest.raises(ConfigurationError) as error:
        queue_settings("q", *layers)
    message = str(error.value)
    assert all(k in message for k in keys), message


def test_split_options_own_producer_settings_and_conf_case_insensitively() -> None:
    own, producer, conf = split_options(
        {"queue": "/q", "maxrecordspertrigger": "5", "capacity": "3", "spark.flow.stopcount": "9"},
        ["queue", "maxRecordsPerTrigger"],
    )
    assert own == {"queue": "/q", "maxRecordsPerTrigger": "5"}
    assert producer == {"capacity": "3"}
    assert conf == {"spark.flow.stopCount": "9"}
    with pytest.raises(UnknownKeyError, match="Did you mean 'maxRecordsPerTrigger'"):
        split_options({"maxRecordPerTrigger": "5"}, ["queue", "maxRecordsPerTrigger"])
    with pytest.raises(QueueSettingError, match="stopCount is a queue setting"):
        split_options({"stopcount": "5"}, ["queue"])


def test_home_limits_follow_the_queue_rules_resume_zero_is_the_stop() -> None:
    assert home_thresholds({"spark.flow.homeStopCount": "1000", "spark.flow.homeResumeCount": "600",
                            "spark.flow.homeStopSize": "1m"}) == Thresholds(1000, 600, 1024**2, 1024**2)
    assert home_thresholds({}) == Thresholds() and not home_thresholds({}).enabled
    assert home_thresholds({"homeStopCount": "0", "homeResumeCount": "5"}) == Thresholds()  # not used


def test_a_home_resume_above_its_stop_names_both_keys() -> None:
    with pytest.raises(ConfigurationError, match=r"spark.flow.homeResumeCount='900'.*<= spark.flow.homeStopCount=500"):
        home_thresholds({"spark.flow.homeStopCount": "500", "spark.flow.homeResumeCount": "900"})


@pytest.mark.parametrize("key, value", [("spark.flow.homeStopCount", "-1"), ("spark.flow.homeResumeSize", "-8k"),
                                        ("spark.flow.homeStopCount", "1.5")])
def test_a_bad_home_limit_names_the_key_the_value_and_what_is_allowed(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"{key}={value!r} is not valid: allowed is")):
        check_conf({key: value})
    with pytest.raises(ConfigurationError, match=re.escape(f"{key}={value!r}")):
        home_thresholds({key: value})


def test_a_home_limit_is_neither_a_queue_setting_nor_a_pattern_key() -> None:
    with pytest.raises(ConfigurationError, match="a queue setting here"):
        queue_settings("q", {"flow.homeStopCount": "10"})
    with pytest.raises(UnknownKeyError):
        check_conf({"spark.flow.queues.events.homeStopCount": "10"})


def test_a_home_limit_among_a_producers_options_says_where_it_belongs() -> None:
    with pytest.raises(ConfigurationError, match=r"homeStopCount='10'.*a producer setting here.*a home setting: "
                                                 r"spark\.flow\.homeStopCount in the Spark conf, or spark-flow set-home"):
        producer_settings("q", {"homeStopCount": "10"})
