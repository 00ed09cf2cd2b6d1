"""Configuration keys, their parsing, and how they resolve.

Two kinds of settings (design 2.1). A queue's flow state is one shared thing, so its **queue
settings** (thresholds, maxima, limit policy, ``producerFlowControl``, stall detection) have one
value for every process: they are recorded with the queue (``flow.*`` table properties, Qpid's
``qpid.*`` declare arguments as aliases, and run-time settings), and Spark conf only supplies a
value the queue has none recorded for. **Producer settings** (``capacity``, ``onFull``,
``rejectTimeout``, ``pollInterval``) belong to one query: its options > Spark conf > defaults.
Every value is parsed once, here; a bad value or an unknown key raises a
:class:`~spark_flow.exceptions.ConfigurationError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from spark_flow.exceptions import ConfigurationError, ProducerSettingError, QueueSettingError, UnknownKeyError
from spark_flow.state import Thresholds
from spark_flow.storage import STORAGE_PREFIX, secret_shown, storage_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONF_PREFIX = "spark.flow."
PATTERN_PREFIX = "spark.flow.queues."
PROPERTY_PREFIX = "flow."

Policy = Literal["flow", "ring", "ring-strict"]
POLICIES: tuple[str, ...] = ("flow", "ring", "ring-strict")
OnFull = Literal["hold", "reject", "reject-after"]
ON_FULL: tuple[str, ...] = ("hold", "reject", "reject-after")
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


def parse_size(key: str, value: Any, minimum: int = 0) -> int:
    """A size in bytes of at least ``minimum``: plain bytes or a number with a unit (``8k``,
    ``10 MB``, Spark's ``10m``; 1k = 1024)."""
    match = _SIZE.match(str(value)) if not isinstance(value, (bool, float)) else None
    allowed = f"bytes as a whole number >= {minimum}, or with a unit: 8k, 10 MB"
    if not match:
        raise ConfigurationError(key, value, allowed)
    number, unit = Fraction(match.group(1)), (match.group(2) or "b")[0].lower()
    size = number * 1024 ** _SIZE_UNITS[unit]
    if size.denominator != 1:
        raise ConfigurationError(key, value, "a whole number of bytes")
    if size < minimum:
        raise ConfigurationError(key, value, allowed)
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
    """A queue's limit policy."""
    text = str(value).strip().lower()
    if text not in POLICIES:
        hint = f"{text} is what a producer does on a full queue: onFull={text}" if text in ON_FULL else ""
        raise ConfigurationError(key, value, "one of " + ", ".join(POLICIES), hint)
    return text  # type: ignore[return-value]


def parse_on_full(key: str, value: Any) -> OnFull:
    """What a producer does while its queue is flow-stopped."""
    text = str(value).strip().lower()
    if text not in ON_FULL:
        raise ConfigurationError(key, value, "one of " + ", ".join(ON_FULL))
    return text  # type: ignore[return-value]


def parse_stalled_policy(key: str, value: Any) -> str:
    """What the controller does with a stalled consumer's subscription."""
    text = str(value).strip().lower()
    if text not in STALLED_POLICIES:
        raise ConfigurationError(key, value, "one of " + ", ".join(STALLED_POLICIES))
    return text


Scope = Literal["queue", "producer", "home"]


@dataclass(frozen=True)
class Key:
    """One setting: its camelCase name (as in ``spark.flow.<name>``), parser, default, doc, and
    whose it is: a ``queue`` setting is one value per queue, recorded with it; a ``producer``
    setting belongs to one query; a ``home`` setting is the home's: its location, and its
    home-wide limits, recorded with the home."""

    name: str
    parse: Callable[[str, Any], Any]
    default: Any
    doc: str
    scope: Scope = "queue"


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("stopCount", parse_count, None, "Flow turns ON when the depth exceeds this many messages (0 = not used)."),
        Key("resumeCount", parse_count, None, "Flow turns OFF when the depth is under this many messages (0: stopCount)."),
        Key("stopSize", parse_size, None, "Flow turns ON when the depth exceeds this many bytes (0 = not used)."),
        Key("resumeSize", parse_size, None, "Flow turns OFF when the depth is under this many bytes (0: stopSize)."),
        Key("stopAge", parse_duration, None, "Flow turns ON when the oldest unacknowledged message is older than this (0 = not used)."),
        Key("resumeAge", parse_duration, None, "Flow turns OFF when the oldest unacknowledged message is younger than this (0: stopAge)."),
        Key("maxCount", parse_count, 0, "The queue's maximum depth in messages; default thresholds derive from it."),
        Key("maxSize", parse_size, 0, "The queue's maximum depth in bytes; default thresholds derive from it."),
        Key("defaultStopThreshold", parse_percent, Fraction(80), "Default stop threshold, percent of the queue's max (rounded half up)."),
        Key("defaultResumeThreshold", parse_percent, Fraction(70), "Default resume threshold, percent of the queue's max (rounded down)."),
        Key("policy", parse_policy, "flow", "The queue's limit policy: " + ", ".join(POLICIES) + "."),
        Key("producerFlowControl", parse_bool, True, "false switches flow control off for the queue."),
        Key("producersStopped", parse_bool, False, "true holds every producer of the queue, whatever its depth (an operator's stop)."),
        Key("stallTimeout", parse_duration, 0.0, "A subscription with messages and no ack progress for this long is stalled (0 = never)."),
        Key("stalledConsumerPolicy", parse_stalled_policy, "flag", "flag: report a stalled subscription; skip: also move it past its backlog."),
        Key("capacity", lambda k, v: parse_count(k, v, minimum=1), 10_000, "A producer's window: messages it may enqueue after the queue went ON.", "producer"),
        Key("onFull", parse_on_full, "hold", "What a producer does while its queue is flow-stopped: " + ", ".join(ON_FULL) + ".", "producer"),
        Key("rejectTimeout", parse_duration, 30.0, "With onFull reject-after: how long a producer is held before it fails.", "producer"),
        Key("pollInterval", lambda k, v: parse_duration(k, v, minimum=0.001), 1.0, "Longest wait between two looks at a held queue's depth.", "producer"),
        Key("home", lambda k, v: str(v), None, "The control plane's location: queue registry, status, history, commands; default state of new queues.", "home"),
        Key("homeStopCount", parse_count, None, "Every producer of the home is held when the home's depth exceeds this many messages (0 = not used).", "home"),
        Key("homeResumeCount", parse_count, None, "The home's producers go on when its depth is under this many messages (0: homeStopCount).", "home"),
        Key("homeStopSize", parse_size, None, "Every producer of the home is held when the home's depth exceeds this many bytes (0 = not used).", "home"),
        Key("homeResumeSize", parse_size, None, "The home's producers go on when its depth is under this many bytes (0: homeStopSize).", "home"),
    )
}
QUEUE_KEYS: tuple[str, ...] = tuple(name for name, key in KEYS.items() if key.scope == "queue")
PRODUCER_KEYS: tuple[str, ...] = tuple(name for name, key in KEYS.items() if key.scope == "producer")
#: The home-wide limits: recorded with the home, one value for every process of its queues.
HOME_KEYS: tuple[str, ...] = ("homeStopCount", "homeResumeCount", "homeStopSize", "homeResumeSize")

QPID_ALIASES: dict[str, str] = {
    "qpid.flow_stop_count": "stopCount",
    "qpid.flow_resume_count": "resumeCount",
    "qpid.flow_stop_size": "stopSize",
    "qpid.flow_resume_size": "resumeSize",
    "qpid.max_count": "maxCount",
    "qpid.max_size": "maxSize",
}

#: Properties a declared queue carries that are facts about it, not settings.
QUEUE_PROPERTIES: frozenset[str] = frozenset({"flow.queueName", "flow.stateLocation", "flow.home"})


def _closest(key: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def setting_name(key: str, value: Any = None) -> str:
    """The setting a key names, in any of its spellings: ``stopCount``, ``flow.stopCount``,
    ``spark.flow.stopCount``, ``qpid.flow_stop_count``. Unknown keys raise, naming the closest
    valid key in the same spelling."""
    if key in QPID_ALIASES:
        return QPID_ALIASES[key]
    if key.startswith(PATTERN_PREFIX) and key.rpartition(".")[2] in KEYS:
        return key.rpartition(".")[2]
    for prefix in (CONF_PREFIX, PROPERTY_PREFIX, ""):
        if key.startswith(prefix) and key[len(prefix):] in KEYS:
            return key[len(prefix):]
    prefix = next((p for p in (CONF_PREFIX, PROPERTY_PREFIX) if key.startswith(p)), "")
    spellings = [prefix + name for name in KEYS] + (list(QPID_ALIASES) if prefix != CONF_PREFIX else [])
    raise UnknownKeyError(key, value, _closest(key, spellings))


def queue_setting(key: str, value: Any, allowed: Collection[str] = QUEUE_KEYS) -> str:
    """The queue setting a key names, in any spelling; a producer's setting or any other key
    not in ``allowed`` raises, naming what is allowed."""
    name = setting_name(key, value)
    if name not in allowed:
        listed = "a queue setting here: " + ", ".join(allowed)
        if KEYS[name].scope == "producer":
            raise ProducerSettingError(key, value, name, listed)
        raise ConfigurationError(key, value, listed)
    return name


def is_setting(key: str) -> bool:
    """Whether a table property or run-time key is a spark-flow setting (``flow.*``, ``qpid.*``,
    a plain name), not a fact about the queue (``flow.queueName``) nor another system's."""
    return key not in QUEUE_PROPERTIES and (key.startswith((PROPERTY_PREFIX, "qpid.", CONF_PREFIX)) or "." not in key)


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


def _specificity(pattern: str) -> tuple[int, int]:
    """Order patterns so that more literal ones are applied last and win."""
    parts = pattern.split(".")
    return sum(p not in ("*", ">") for p in parts), len(parts)


def check_conf(conf: Mapping[str, Any]) -> None:
    """Every ``spark.flow.*`` key known and every value valid, before anything starts."""
    conf_keys = [CONF_PREFIX + name for name in KEYS]
    storage_options({key: value for key, value in conf.items() if key.lower().startswith(STORAGE_PREFIX)})
    for key, value in conf.items():
        if not key.startswith(CONF_PREFIX) or key.lower().startswith(STORAGE_PREFIX):
            continue
        if key.startswith(PATTERN_PREFIX) and "." in key[len(PATTERN_PREFIX):]:
            pattern, _, name = key[len(PATTERN_PREFIX):].rpartition(".")
            if name not in KEYS or KEYS[name].scope == "home":
                closest = _closest(name, [n for n in KEYS if KEYS[n].scope != "home"])
                raise UnknownKeyError(key, value, closest and f"{PATTERN_PREFIX}{pattern}.{closest}")
        elif key[len(CONF_PREFIX):] not in KEYS:
            raise UnknownKeyError(key, secret_shown(key, value), _closest(key, conf_keys))
        else:
            name = key[len(CONF_PREFIX):]
        KEYS[name].parse(key, value)


def conf_settings(queue: str, conf: Mapping[str, Any], scope: Scope) -> dict[str, tuple[str, Any]]:
    """The settings of ``scope`` that a Spark conf gives explicitly for ``queue``, by name, each
    with the key it came from: ``spark.flow.<key>``, then ``spark.flow.queues.<pattern>.<key>``
    for matching patterns, more literal patterns last (they win). Built-in defaults are not in it."""
    check_conf(conf)
    found: dict[str, tuple[str, Any]] = {}
    patterns: list[tuple[str, str, str]] = []
    for key, value in conf.items():
        if key.startswith(PATTERN_PREFIX) and "." in key[len(PATTERN_PREFIX):]:
            pattern, _, name = key[len(PATTERN_PREFIX):].rpartition(".")
            if pattern_matches(pattern, queue):
                patterns.append((pattern, name, key))
        elif key.startswith(CONF_PREFIX) and not key.startswith(STORAGE_PREFIX) and KEYS[key[len(CONF_PREFIX):]].scope == scope:
            found[key[len(CONF_PREFIX):]] = (key, value)
    for _pattern, name, key in sorted(patterns, key=lambda p: _specificity(p[0])):
        if KEYS[name].scope == scope:
            found[name] = (key, conf[key])
    return found


@dataclass(frozen=True)
class QueueSettings:
    """The settings in force for one queue: what every process judges it with.

    ``thresholds`` are those flow control applies: none for ring queues or with
    ``producerFlowControl=false``. ``values`` holds each setting as recorded (None: a threshold
    left to the defaults) and ``origins`` where it came from (the key a user wrote, or
    "default"), so messages can name it.
    """

    queue: str
    thresholds: Thresholds = field(default_factory=Thresholds)
    max_count: int = 0
    max_size: int = 0
    policy: Policy = "flow"
    producer_flow_control: bool = True
    producers_stopped: bool = False
    stall_timeout: float = 0.0
    stalled_consumer_policy: str = "flag"
    values: Mapping[str, Any] = field(default_factory=dict, compare=False)
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def flow_controlled(self) -> bool:
        """Whether the queue's producers are flow-controlled at all (policy ``flow`` and
        ``producerFlowControl``): a home-wide stop holds them, whatever the queue's own thresholds."""
        return self.producer_flow_control and self.policy == "flow"


def queue_settings(queue: str, *layers: Mapping[str, Any]) -> QueueSettings:
    """Resolve a queue's settings from its recorded layers, lowest first (table properties, then
    run-time settings): each key in any spelling (``flow.stopCount``, ``qpid.flow_stop_count``,
    ``spark.flow.stopCount``, ``stopCount``), so an error names the key as the user wrote it;
    keys of other systems (``delta.*``) are ignored. Every value is checked,
    and so is the whole: Qpid's threshold rules (section 1 of the design) with errors naming
    both keys."""
    values: dict[str, Any] = {name: KEYS[name].default for name in QUEUE_KEYS}
    origins: dict[str, str] = {name: "default" for name in QUEUE_KEYS}
    for layer in layers:
        for key, raw in layer.items():
            if raw is None or not is_setting(key):
                continue
            name = queue_setting(key, raw)
            values[name] = KEYS[name].parse(key, raw)
            origins[name] = key
    thresholds = _thresholds(values, origins)
    if values["policy"].startswith("ring") and not (values["maxCount"] or values["maxSize"]):
        raise ConfigurationError(origins["policy"], values["policy"], "a ring policy with maxCount or maxSize above 0",
                                 "A ring queue discards its oldest messages beyond its max: give it one")
    flow_controlled = values["producerFlowControl"] and values["policy"] == "flow"
    return QueueSettings(
        queue=queue,
        thresholds=thresholds if flow_controlled else Thresholds(),
        max_count=values["maxCount"],
        max_size=values["maxSize"],
        policy=values["policy"],
        producer_flow_control=values["producerFlowControl"],
        producers_stopped=values["producersStopped"],
        stall_timeout=values["stallTimeout"],
        stalled_consumer_policy=values["stalledConsumerPolicy"],
        values=values,
        origins=origins,
    )


def home_thresholds(*layers: Mapping[str, Any]) -> Thresholds:
    """A home's limits (``homeStopCount``, ...) from its recorded layers, lowest first, each key in
    any spelling (``homeStopCount``, ``spark.flow.homeStopCount``). The same rules as a queue's
    thresholds (Qpid's): a resume of 0 means the stop, a resume above its stop is an error naming
    both keys; a home has no max and no default percentages, so no limit unless one is given."""
    values: dict[str, Any] = dict.fromkeys(HOME_KEYS)
    origins: dict[str, str] = {name: name for name in HOME_KEYS}
    for layer in layers:
        for key, raw in layer.items():
            if raw is None:
                continue
            name = setting_name(key, raw)
            if name not in HOME_KEYS:
                raise ConfigurationError(key, raw, "a home setting: " + ", ".join(HOME_KEYS))
            values[name], origins[name] = KEYS[name].parse(key, raw), key
    as_queue = {"maxCount": 0, "maxSize": 0, "defaultStopThreshold": 0, "defaultResumeThreshold": 0,
                "stopAge": None, "resumeAge": None}
    measures = {"stopCount": "homeStopCount", "resumeCount": "homeResumeCount", "stopSize": "homeStopSize",
                "resumeSize": "homeResumeSize"}
    as_queue.update({name: values[home] for name, home in measures.items()})
    return _thresholds(as_queue, {name: origins[home] for name, home in measures.items()})


def _round_half_up(value: Fraction) -> int:
    return math.floor(value + Fraction(1, 2))


def default_thresholds(max_count: int, max_size: int, stop_percent: Fraction, resume_percent: Fraction) -> Thresholds:
    """Qpid's default thresholds (``QueueFlowLimit::createLimit``): percentages of the queue's
    max, stop rounded half up, resume rounded down. A max of 0 gives no default for its measure."""
    return Thresholds(
        stop_count=_round_half_up(max_count * stop_percent / 100),
        resume_count=math.floor(max_count * resume_percent / 100),
        stop_size=_round_half_up(max_size * stop_percent / 100),
        resume_size=math.floor(max_size * resume_percent / 100),
    )


def _thresholds(values: Mapping[str, Any], origins: Mapping[str, str]) -> Thresholds:
    """Qpid's rules: the defaults fill every threshold, each explicit threshold replaces its own
    value only; then per measure with a stop, a resume of 0 means the stop (no queue is held
    forever at depth 0), and a resume above the stop or a stop above the max is an error. The
    backlog age has no max and no default: only explicit ``stopAge`` / ``resumeAge``."""
    stop_pct, resume_pct = values["defaultStopThreshold"], values["defaultResumeThreshold"]
    if stop_pct and resume_pct > stop_pct:
        _raise_above(origins, "defaultResumeThreshold", resume_pct, "defaultStopThreshold", stop_pct)
    defaults = default_thresholds(values["maxCount"], values["maxSize"], stop_pct, resume_pct)
    chosen: dict[str, Any] = {}
    for name, default in (("stopCount", defaults.stop_count), ("resumeCount", defaults.resume_count),
                          ("stopSize", defaults.stop_size), ("resumeSize", defaults.resume_size),
                          ("stopAge", 0.0), ("resumeAge", 0.0)):
        chosen[name] = values[name] if values[name] is not None else default
    for stop, resume, maximum in (("stopCount", "resumeCount", "maxCount"), ("stopSize", "resumeSize", "maxSize"),
                                  ("stopAge", "resumeAge", None)):
        if not chosen[stop]:
            chosen[resume] = chosen[stop]  # 0: the measure is not used
            continue
        if maximum and values[maximum] and chosen[stop] > values[maximum]:
            _raise_above(origins, stop, chosen[stop], maximum, values[maximum], "a stop threshold above the max "
                         "is never reached before the queue is full")
        if not chosen[resume]:
            chosen[resume] = chosen[stop]
        elif chosen[resume] > chosen[stop]:
            _raise_above(origins, resume, chosen[resume], stop, chosen[stop])
    return Thresholds(chosen["stopCount"], chosen["resumeCount"], chosen["stopSize"], chosen["resumeSize"],
                      chosen["stopAge"], chosen["resumeAge"])


def _raise_above(origins: Mapping[str, str], key: str, value: Any, limit_key: str, limit: Any,
                 why: str = "a resume threshold above its stop threshold locks flow control on") -> None:
    def spelled(name: str) -> str:
        origin = origins.get(name, "default")
        return f"{name} (default)" if origin == "default" else origin

    def shown(amount: Any) -> str:
        return f"{amount:g}s" if isinstance(amount, float) else str(amount)  # ages are seconds

    raise ConfigurationError(spelled(key), shown(value), f"a value <= {spelled(limit_key)}={shown(limit)} ({why})")


@dataclass(frozen=True)
class ProducerSettings:
    """One producer's settings: its capacity window and what it does while its queue is
    flow-stopped (hold, reject, reject-after), parsed once where the sink is made."""

    capacity: int = 10_000
    on_full: OnFull = "hold"
    reject_timeout: float = 30.0
    poll_interval: float = 1.0


def producer_settings(queue: str, options: Mapping[str, Any] | None = None,
                      conf: Mapping[str, Any] | None = None) -> ProducerSettings:
    """A producer's settings for ``queue``: the query's options > Spark conf (patterns over
    ``spark.flow.<key>``) > defaults. A queue setting among the options raises, saying where
    it belongs."""
    values = {name: KEYS[name].default for name in PRODUCER_KEYS}
    for name, (key, raw) in conf_settings(queue, conf or {}, "producer").items():
        values[name] = KEYS[name].parse(key, raw)
    for name, raw in producer_options(options or {}).items():
        values[name] = KEYS[name].parse(name, raw)
    return ProducerSettings(values["capacity"], values["onFull"], values["rejectTimeout"], values["pollInterval"])


def producer_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The producer settings among a query's options, by canonical name (Spark lower-cases
    data source options); a queue setting raises, naming where it belongs."""
    canonical = {name.lower(): name for name in KEYS}
    settings = {}
    for key, value in options.items():
        name = canonical.get(key.lower())
        if name is None:
            raise UnknownKeyError(key, value, _closest(key, PRODUCER_KEYS))
        if KEYS[name].scope == "home":
            raise ConfigurationError(key, value, "a producer setting here: " + ", ".join(PRODUCER_KEYS),
                                     f"{name} is a home setting: spark.flow.{name} in the Spark conf, or spark-flow "
                                     "set-home")
        if KEYS[name].scope != "producer":
            raise QueueSettingError(name, value)
        settings[name] = value
    return settings


def flow_conf(conf: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """The ``spark.flow.*`` entries of a Spark conf (``spark.conf.getAll`` or ``SparkConf.getAll()``)."""
    items = conf.items() if isinstance(conf, Mapping) else conf
    return {key: value for key, value in items if key.startswith(CONF_PREFIX)}


def session_flow_conf(spark: SparkSession) -> dict[str, str]:
    """The ``spark.flow.*`` entries of a session's run-time conf, as set now (a classic or a
    Spark Connect session). Read once where a query, a queue or the controller is set up."""
    return flow_conf(spark.conf.getAll)


def split_options(options: Mapping[str, Any], own: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split a query's options into its own options, producer settings and passed-on Spark conf.

    Option names match case-insensitively (Spark lower-cases data source options) and come back
    in their canonical spelling. Options named ``spark.flow.*`` carry the Spark conf into places
    that have no SparkSession (Python data source workers). A queue setting raises, saying where
    it belongs; any other unknown option raises, naming the closest known one.
    """
    own = list(own)
    canonical = {name.lower(): name for name in own}
    mine, rest, conf = {}, {}, {}
    for key, value in options.items():
        if key.lower() in canonical:
            mine[canonical[key.lower()]] = value
        elif key.lower().startswith(CONF_PREFIX.lower()):
            conf[_conf_spelling(key, value)] = value
        elif key.lower() in {name.lower() for name in KEYS}:
            rest[key] = value
        else:
            raise UnknownKeyError(key, value, _closest(key, own + list(PRODUCER_KEYS)))
    check_conf(conf)
    return mine, producer_options(rest), conf


def _conf_spelling(key: str, value: Any) -> str:
    """A ``spark.flow.*`` key as Spark conf spells it (data source options arrive lower-cased;
    storage option names are lower-case anyway)."""
    if key.lower().startswith(STORAGE_PREFIX):
        return key.lower()
    if key.lower().startswith(PATTERN_PREFIX.lower()):
        pattern, _, name = key[len(PATTERN_PREFIX):].rpartition(".")
        spelled = {n.lower(): n for n in KEYS}.get(name.lower(), name)
        return f"{PATTERN_PREFIX}{pattern}.{spelled}"
    spelled = {CONF_PREFIX.lower() + n.lower(): CONF_PREFIX + n for n in KEYS}
    if key.lower() not in spelled:
        raise UnknownKeyError(key, value, _closest(key, list(spelled.values())))
    return spelled[key.lower()]
