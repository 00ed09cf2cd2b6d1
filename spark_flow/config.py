"""Configuration keys, their parsing, and the precedence that resolves them for one queue.

Settings come from four layers, most specific first: a query's option, the queue table's
``flow.*`` property (Qpid's ``qpid.*`` declare arguments are accepted as aliases), the Spark
conf (``spark.flow.queues.<pattern>.<key>`` before ``spark.flow.<key>``), and the defaults.
Every value is parsed once, here; a bad value or an unknown key raises a
:class:`~spark_flow.exceptions.ConfigurationError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from spark_flow.exceptions import ConfigurationError, UnknownKeyError
from spark_flow.state import Thresholds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONF_PREFIX = "spark.flow."
PATTERN_PREFIX = "spark.flow.queues."
PROPERTY_PREFIX = "flow."

Policy = Literal["flow", "reject", "reject-after", "ring", "ring-strict"]
POLICIES: tuple[str, ...] = ("flow", "reject", "reject-after", "ring", "ring-strict")
STALLED_POLICIES: tuple[str, ...] = ("flag", "skip")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.I)
_SIZE_UNITS = {"b": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)?\s*$", re.I
)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_count(key: str, value: Any, minimum: int = 0) -> int:
    """A message count: a whole number of at least ``minimum``, as int or digits."""
    text = str(value).strip()
    if isinstance(value, (bool, float)) or not re.fullmatch(r"\d+", text):
        raise ConfigurationError(key, value, f"a whole number >= {minimum}")
    count = int(text)
    if count < minimum:
        raise ConfigurationError(key, value, f"a whole number >= {minimum}")
    return count


def parse_size(key: str, value: Any) -> int:
    """A size in bytes: plain bytes or a number with a unit (``8k``, ``10 MB``; 1k = 1024)."""
    match = _SIZE.match(str(value)) if not isinstance(value, (bool, float)) else None
    if not match:
        raise ConfigurationError(key, value, "bytes as a whole number >= 0, or with a unit: 8k, 10 MB")
    number, unit = Fraction(match.group(1)), (match.group(2) or "b")[0].lower()
    size = number * 1024 ** _SIZE_UNITS[unit]
    if size.denominator != 1:
        raise ConfigurationError(key, value, "a whole number of bytes")
    return int(size)


def parse_percent(key: str, value: Any) -> Fraction:
    """A percentage of a queue's maximum, 0 to 100."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"\d+(\.\d+)?", text):
        raise ConfigurationError(key, value, "a percentage from 0 to 100")
    percent = Fraction(text)
    if percent > 100:
        raise ConfigurationError(key, value, "a percentage from 0 to 100")
    return percent


def parse_duration(key: str, value: Any, minimum: float = 0.0) -> float:
    """A duration in seconds, from ``500ms``, ``5s``, ``2 min``, ``1h`` or milliseconds."""
    match = _DURATION.match(str(value)) if not isinstance(value, bool) else None
    seconds = None
    if match:
        unit = (match.group(2) or "ms").lower()
        scale = _DURATION_UNITS["ms" if unit == "ms" else unit[0]]
        seconds = float(match.group(1)) * scale
    if seconds is None or seconds < minimum or (minimum > 0 and seconds == 0):
        allowed = "a duration such as 500ms, 5s, 2min, 1h (a plain number is milliseconds)"
        raise ConfigurationError(key, value, f"{allowed}, above 0" if minimum > 0 else allowed)
    return seconds


def parse_bool(key: str, value: Any) -> bool:
    """A boolean, as Spark conf writes it: true or false."""
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(key, value, "true or false")
    return text == "true"


def parse_policy(key: str, value: Any) -> Policy:
    """A limit policy name."""
    text = str(value).strip().lower()
    if text not in POLICIES:
        raise ConfigurationError(key, value, "one of " + ", ".join(POLICIES))
    return text  # type: ignore[return-value]


def parse_stalled_policy(key: str, value: Any) -> str:
    """What the controller does with a stalled consumer's subscription."""
    text = str(value).strip().lower()
    if text not in STALLED_POLICIES:
        raise ConfigurationError(key, value, "one of " + ", ".join(STALLED_POLICIES))
    return text


@dataclass(frozen=True)
class Key:
    """One setting: its camelCase name (as in ``spark.flow.<name>``), parser, default and doc."""

    name: str
    parse: Callable[[str, Any], Any]
    default: Any
    doc: str


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("stopCount", parse_count, None, "Flow turns ON when the depth exceeds this many messages (0 = not used)."),
        Key("resumeCount", parse_count, None, "Flow turns OFF when the depth is under this many messages (default: stopCount)."),
        Key("stopSize", parse_size, None, "Flow turns ON when the depth exceeds this many bytes (0 = not used)."),
        Key("resumeSize", parse_size, None, "Flow turns OFF when the depth is under this many bytes (default: stopSize)."),
        Key("maxCount", parse_count, 0, "The queue's maximum depth in messages; default thresholds derive from it."),
        Key("maxSize", parse_size, 0, "The queue's maximum depth in bytes; default thresholds derive from it."),
        Key("defaultStopThreshold", parse_percent, Fraction(80), "Default stop threshold, percent of the queue's max (rounded up)."),
        Key("defaultResumeThreshold", parse_percent, Fraction(70), "Default resume threshold, percent of the queue's max (rounded down)."),
        Key("policy", parse_policy, "flow", "Limit policy: " + ", ".join(POLICIES) + "."),
        Key("rejectTimeout", parse_duration, 30.0, "With policy reject-after: how long a producer is held before it fails."),
        Key("capacity", lambda k, v: parse_count(k, v, minimum=1), 10_000, "A producer's window: messages it may enqueue after the queue went ON."),
        Key("pollInterval", lambda k, v: parse_duration(k, v, minimum=0.001), 1.0, "Longest wait between two looks at a held queue's depth."),
        Key("producerFlowControl", parse_bool, True, "false switches flow control off for the queue."),
        Key("producersStopped", parse_bool, False, "true holds every producer of the queue, whatever its depth (an operator's stop)."),
        Key("stallTimeout", parse_duration, 0.0, "A subscription with messages and no ack progress for this long is stalled (0 = never)."),
        Key("stalledConsumerPolicy", parse_stalled_policy, "flag", "flag: report a stalled subscription; skip: also move it past its backlog."),
        Key("home", lambda k, v: str(v), None, "The control plane's location: queue registry, status, history, commands; default state of new queues."),
    )
}

QPID_ALIASES: dict[str, str] = {
    "qpid.flow_stop_count": "stopCount",
    "qpid.flow_resume_count": "resumeCount",
    "qpid.flow_stop_size": "stopSize",
    "qpid.flow_resume_size": "resumeSize",
    "qpid.max_count": "maxCount",
    "qpid.max_size": "maxSize",
}

#: Properties a declared queue carries that are facts about it, not settings.
QUEUE_PROPERTIES: frozenset[str] = frozenset({"flow.queueName", "flow.stateLocation"})


def _closest(key: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def pattern_matches(pattern: str, queue: str) -> bool:
    """Whether an ActiveMQ-style destination pattern matches a queue name.

    Names are split on ``.``; ``*`` matches one segment, a trailing ``>`` one or more.
    """
    parts, names = pattern.split("."), queue.split(".")
    for i, part in enumerate(parts):
        if part == ">" and i == len(parts) - 1:
            return len(names) > i
        if i >= len(names) or (part != "*" and part != names[i]):
            return False
    return len(parts) == len(names)


def _split_conf(conf: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Split ``spark.flow.*`` conf into global settings and per-pattern settings, checking keys."""
    conf_keys = [CONF_PREFIX + name for name in KEYS]
    settings: dict[str, Any] = {}
    patterns: dict[str, dict[str, Any]] = {}
    for key, value in conf.items():
        if not key.startswith(CONF_PREFIX):
            continue
        if key.startswith(PATTERN_PREFIX) and "." in key[len(PATTERN_PREFIX):]:
            pattern, _, name = key[len(PATTERN_PREFIX):].rpartition(".")
            if name not in KEYS:
                closest = _closest(name, KEYS)
                raise UnknownKeyError(key, value, closest and f"{PATTERN_PREFIX}{pattern}.{closest}")
            patterns.setdefault(pattern, {})[key] = value
        elif key[len(CONF_PREFIX):] in KEYS:
            settings[key] = value
        else:
            raise UnknownKeyError(key, value, _closest(key, conf_keys))
    return settings, sorted(patterns.items(), key=lambda p: _specificity(p[0]))


def _specificity(pattern: str) -> tuple[int, int]:
    """Order patterns so that more literal ones are applied last and win."""
    parts = pattern.split(".")
    return sum(p not in ("*", ">") for p in parts), len(parts)


def _property_settings(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The ``flow.*`` and ``qpid.*`` settings among a table's properties, keys checked."""
    names = [PROPERTY_PREFIX + name for name in KEYS] + list(QPID_ALIASES)
    settings = {}
    for key, value in properties.items():
        if key in QUEUE_PROPERTIES:
            continue
        if (key.startswith(PROPERTY_PREFIX) and key[len(PROPERTY_PREFIX):] in KEYS) or key in QPID_ALIASES:
            settings[key] = value
        elif key.startswith((PROPERTY_PREFIX, "qpid.")):
            raise UnknownKeyError(key, value, _closest(key, names))
    return settings


def _name_of(key: str) -> str:
    """The setting a layer's key refers to: ``flow.stopCount``, ``qpid.flow_stop_count`` -> stopCount."""
    if key in QPID_ALIASES:
        return QPID_ALIASES[key]
    return key.rpartition(".")[2]


@dataclass(frozen=True)
class FlowConfig:
    """The settings in force for one queue, after precedence and defaults.

    ``thresholds`` are those the gate applies: none for ring queues or with
    ``producerFlowControl=false``. ``origins`` maps each setting to the key it came from, so
    messages can name what the user wrote.
    """

    queue: str
    thresholds: Thresholds
    max_count: int
    max_size: int
    policy: Policy
    capacity: int
    reject_timeout: float
    poll_interval: float
    producer_flow_control: bool
    producers_stopped: bool = False
    stall_timeout: float = 0.0
    stalled_consumer_policy: str = "flag"
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)


def resolve(
    queue: str,
    *,
    options: Mapping[str, Any] | None = None,
    table_properties: Mapping[str, Any] | None = None,
    conf: Mapping[str, Any] | None = None,
) -> FlowConfig:
    """Resolve the settings of ``queue``: option > table property > Spark conf > default.

    Parameters
    ----------
    queue : str
        The queue's name, matched against ``spark.flow.queues.<pattern>.*`` entries.
    options : mapping, optional
        Per-query settings by plain name (``stopCount``); keys must be known settings.
    table_properties : mapping, optional
        The queue table's properties; ``flow.*`` and ``qpid.*`` keys are read, others ignored.
    conf : mapping, optional
        Spark conf entries; ``spark.flow.*`` keys are read, others ignored.
    """
    global_conf, pattern_conf = _split_conf(conf or {})
    layers: list[dict[str, Any]] = [global_conf]
    layers += [entries for pattern, entries in pattern_conf if pattern_matches(pattern, queue)]
    layers.append(_property_settings(table_properties or {}))
    for key in options or {}:
        if key not in KEYS:
            raise UnknownKeyError(key, options[key], _closest(key, KEYS))
    layers.append(dict(options or {}))

    values: dict[str, Any] = {name: key.default for name, key in KEYS.items()}
    origins: dict[str, str] = {name: f"{CONF_PREFIX}{name} (default)" for name in KEYS}
    for layer in layers:
        for key, raw in layer.items():
            name = _name_of(key)
            values[name] = KEYS[name].parse(key, raw)
            origins[name] = key
    thresholds = _thresholds(values, origins)
    flow_controlled = values["producerFlowControl"] and not values["policy"].startswith("ring")
    return FlowConfig(
        queue=queue,
        thresholds=thresholds if flow_controlled else Thresholds(),
        max_count=values["maxCount"],
        max_size=values["maxSize"],
        policy=values["policy"],
        capacity=values["capacity"],
        reject_timeout=values["rejectTimeout"],
        poll_interval=values["pollInterval"],
        producer_flow_control=values["producerFlowControl"],
        producers_stopped=values["producersStopped"],
        stall_timeout=values["stallTimeout"],
        stalled_consumer_policy=values["stalledConsumerPolicy"],
        origins=origins,
    )


def default_thresholds(max_count: int, max_size: int, stop_percent: Fraction, resume_percent: Fraction) -> Thresholds:
    """Qpid's default thresholds: percentages of the queue's max, stop rounded up, resume down.

    A stop percentage of 0 disables default flow control.
    """
    if not stop_percent:
        return Thresholds()
    return Thresholds(
        stop_count=math.ceil(max_count * stop_percent / 100),
        resume_count=math.floor(max_count * resume_percent / 100),
        stop_size=math.ceil(max_size * stop_percent / 100),
        resume_size=math.floor(max_size * resume_percent / 100),
    )


def _thresholds(values: dict[str, Any], origins: dict[str, str]) -> Thresholds:
    """Explicit stop thresholds win over the defaults (as Qpid: any explicit stop, no defaults).

    A resume threshold not given defaults to its stop threshold.
    """
    stop_pct, resume_pct = values["defaultStopThreshold"], values["defaultResumeThreshold"]
    if stop_pct and resume_pct > stop_pct:
        _raise_above(origins["defaultResumeThreshold"], resume_pct, origins["defaultStopThreshold"], stop_pct)
    if values["stopCount"] is None and values["stopSize"] is None:
        thresholds = default_thresholds(values["maxCount"], values["maxSize"], stop_pct, resume_pct)
        resume_count = values["resumeCount"] if values["resumeCount"] is not None else thresholds.resume_count
        resume_size = values["resumeSize"] if values["resumeSize"] is not None else thresholds.resume_size
        stops = {"stopCount": thresholds.stop_count, "stopSize": thresholds.stop_size}
    else:
        stops = {"stopCount": values["stopCount"] or 0, "stopSize": values["stopSize"] or 0}
        resume_count = values["resumeCount"] or stops["stopCount"]
        resume_size = values["resumeSize"] or stops["stopSize"]
    for stop_key, resume_key, resume in (("stopCount", "resumeCount", resume_count), ("stopSize", "resumeSize", resume_size)):
        if stops[stop_key] and resume > stops[stop_key]:
            _raise_above(origins[resume_key], resume, origins[stop_key], stops[stop_key])
    return Thresholds(
        stop_count=stops["stopCount"],
        resume_count=resume_count if stops["stopCount"] else 0,
        stop_size=stops["stopSize"],
        resume_size=resume_size if stops["stopSize"] else 0,
    )


def _raise_above(resume_key: str, resume: Any, stop_key: str, stop: Any) -> None:
    raise ConfigurationError(
        resume_key,
        str(resume),
        f"a value <= {stop_key}={stop} (a resume threshold above its stop threshold locks flow control on)",
    )


def flow_conf(conf: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """The ``spark.flow.*`` entries of a Spark conf (``spark.conf.getAll`` or ``SparkConf.getAll()``)."""
    items = conf.items() if isinstance(conf, Mapping) else conf
    return {key: value for key, value in items if key.startswith(CONF_PREFIX)}


def session_flow_conf(spark: SparkSession) -> dict[str, str]:
    """The ``spark.flow.*`` entries of a session's run-time conf, as set now.

    Read on every micro-batch (a threshold set with ``spark.conf.set`` applies from the next
    one), so only those keys cross py4j: ``spark.conf.getAll`` fetches every entry one call at a
    time and costs ~40 ms a batch.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    everything = jvm.java.util.TreeMap(spark._jsparkSession.conf().getAllAsJava())
    entries = everything.subMap(CONF_PREFIX, CONF_PREFIX[:-1] + chr(ord(".") + 1))
    keys = entries.keySet().toArray()
    return {key: entries.get(key) for key in (keys[i] for i in range(len(keys)))}


def check_options(options: Mapping[str, Any], own: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split a query's options into its own options, flow settings and passed-on Spark conf.

    Option names match case-insensitively (Spark lower-cases data source options) and come back
    in their canonical spelling. Options named ``spark.flow.*`` carry the Spark conf into places
    that have no SparkSession (Python data source workers) and rank as conf, below table
    properties. Any other unknown option raises, naming the closest known one.
    """
    own = list(own)
    canonical = {name.lower(): name for name in own + list(KEYS)}
    conf_names = {CONF_PREFIX.lower() + name.lower(): CONF_PREFIX + name for name in KEYS}
    mine, settings, conf = {}, {}, {}
    for key, value in options.items():
        name = canonical.get(key.lower())
        if name in own:
            mine[name] = value
        elif name is not None:
            settings[name] = value
        elif key.lower().startswith(PATTERN_PREFIX.lower()):
            conf[key] = value
        elif key.lower() in conf_names:
            conf[conf_names[key.lower()]] = value
        elif key.lower().startswith(CONF_PREFIX.lower()):
            closest = _closest(key.lower(), conf_names)
            raise UnknownKeyError(key, value, closest and conf_names[closest])
        else:
            raise UnknownKeyError(key, value, _closest(key, own + list(KEYS)))
    return mine, settings, conf
