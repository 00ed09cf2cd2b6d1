"""Every spark-flow setting, whose it is, and every way a user may spell its key.

A setting has one name (``stopCount``) and several spellings: the Spark conf's
``spark.flow.stopCount`` and ``spark.flow.queues.<pattern>.stopCount``, the table property
``flow.stopCount``, Qpid's declare argument ``qpid.flow_stop_count``, and the plain name in
options and run-time settings. Spark lower-cases data source options, so every spelling is
matched without regard to case, through one table built once (:func:`spelled`). An unknown key
raises :class:`~spark_flow.exceptions.UnknownKeyError` naming the closest valid key in the same
spelling.

Three kinds of settings (docs/design.md 2.1): a ``queue`` setting has one value per queue, recorded with
it; a ``producer`` setting belongs to one query; a ``home`` setting is the home's (its location
and its home-wide limits, recorded with the home).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, cast

from spark_flow.exceptions import ConfigurationError, ProducerSettingError, QueueSettingError, UnknownKeyError
from spark_flow.rules.storage_options import IO_MODES, STORAGE_PREFIX, parse_io, secret_shown, storage_options
from spark_flow.rules.units import parse_bool, parse_choice, parse_count, parse_duration, parse_percent, parse_size

CONF_PREFIX = "spark.flow."
PATTERN_PREFIX = "spark.flow.queues."
PROPERTY_PREFIX = "flow."

Policy = Literal["flow", "ring", "ring-strict"]
POLICIES: tuple[str, ...] = ("flow", "ring", "ring-strict")
OnFull = Literal["hold", "reject", "reject-after"]
ON_FULL: tuple[str, ...] = ("hold", "reject", "reject-after")
STALLED_POLICIES: tuple[str, ...] = ("flag", "skip")
Scope = Literal["queue", "producer", "home", "process"]



def parse_policy(key: str, value: Any) -> Policy:
    """A queue's limit policy."""
    text = str(value).strip().lower()
    hint = f"{text} is what a producer does on a full queue: onFull={text}" if text in ON_FULL else ""
    return cast(Policy, parse_choice(key, value, POLICIES, hint))


def parse_on_full(key: str, value: Any) -> OnFull:
    """What a producer does while its queue is flow-stopped."""
    return cast(OnFull, parse_choice(key, value, ON_FULL))


def parse_stalled_policy(key: str, value: Any) -> str:
    """What the controller does with a stalled consumer's subscription."""
    return parse_choice(key, value, STALLED_POLICIES)


def _positive_count(key: str, value: Any) -> int:
    return parse_count(key, value, minimum=1)


def _positive_duration(key: str, value: Any) -> float:
    return parse_duration(key, value, minimum=0.001)


def _text(key: str, value: Any) -> str:
    return str(value)


def _queue(key: str, value: Any) -> str:
    if not str(value).strip():
        raise ConfigurationError(key, value, "a queue: a path or a catalog table name")
    return str(value).strip()


@dataclass(frozen=True)
class Key:
    """One setting: its camelCase name (as in ``spark.flow.<name>``), parser, default, doc and scope."""

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
        Key("pacing", parse_bool, False, "true: under the stop threshold, producers are admitted at the rate the queue is drained, its depth steered to the middle between resume and stop (needs stopCount)."),
        Key("producersStopped", parse_bool, False, "true holds every producer of the queue, whatever its depth (an operator's stop)."),
        Key("stallTimeout", parse_duration, 0.0, "A subscription with messages and no ack progress for this long is stalled (0 = never)."),
        Key("stalledConsumerPolicy", parse_stalled_policy, "flag", "flag: report a stalled subscription; skip: also move it past its backlog."),
        Key("messageTtl", parse_duration, 0.0, "A message older than this is not delivered to a subscription that has not read it, and is counted as expired (0 = never)."),
        Key("maxDeliveries", parse_count, 0, "A message whose processing fails this many times alone is moved to the dead-letter queue (0 = never)."),
        Key("deadLetterQueue", _queue, None, "Where dead letters go: a queue path or catalog name (default: the queue's path with _dlq)."),
        Key("maxDeadLettersPerBatch", _positive_count, 10, "More dead letters than this in one batch fail the batch instead: the consumer is broken, not its messages."),
        Key("capacity", _positive_count, 10_000, "A producer's window: messages it may enqueue after the queue went ON.", "producer"),
        Key("onFull", parse_on_full, "hold", "What a producer does while its queue is flow-stopped: " + ", ".join(ON_FULL) + ".", "producer"),
        Key("rejectTimeout", parse_duration, 30.0, "With onFull reject-after: how long a producer is held before it fails.", "producer"),
        Key("pollInterval", _positive_duration, 1.0, "Longest wait between two looks at a held queue's depth.", "producer"),
        Key("msgPublishRate", parse_count, 0, "A producer's publish rate in messages per second: its writes are paced under it (0 = no limit).", "producer"),
        Key("bytePublishRate", parse_size, 0, "A producer's publish rate in bytes per second (1m = 1 MiB/s): its writes are paced under it (0 = no limit).", "producer"),
        Key("pacingWeight", _positive_count, 1, "A producer's share of a paced queue's rate against the other producers writing to it (1 each unless set): 2 is admitted twice what 1 is.", "producer"),
        Key("io", parse_io, "auto", "How this process reads and writes the tables: " + ", ".join(IO_MODES) + " (auto: deltalake where this Python reaches the storage, the engine otherwise).", "process"),
        Key("home", _text, None, "The control plane's location: queue registry, status, history, commands; default state of new queues.", "home"),
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
QUEUE_PROPERTIES: frozenset[str] = frozenset({"flow.queueName", "flow.stateLocation", "flow.home",
                                              "flow.catalogTable"})

Form = Literal["plain", "conf", "pattern", "property", "qpid"]
_PREFIXES: dict[Form, str] = {"conf": CONF_PREFIX, "property": PROPERTY_PREFIX, "plain": ""}
#: Every spelling of every setting but the patterns', lower-cased: (setting, form).
_SPELLINGS: dict[str, tuple[str, Form]] = {
    **{(prefix + name).lower(): (name, form) for form, prefix in _PREFIXES.items() for name in KEYS},
    **{alias: (name, "qpid") for alias, name in QPID_ALIASES.items()},
}


@dataclass(frozen=True)
class Spelled:
    """A key as a user wrote it: the setting it names, how it is spelled, and for a
    ``spark.flow.queues.<pattern>.<name>`` key its pattern."""

    name: str
    form: Form
    pattern: str | None = None

    @property
    def conf_key(self) -> str:
        """The key as Spark conf spells it (data source options arrive lower-cased)."""
        if self.pattern is not None:
            return f"{PATTERN_PREFIX}{self.pattern}.{self.name}"
        return CONF_PREFIX + self.name


def spelled(key: str, value: Any = None) -> Spelled:
    """The setting ``key`` names, in any spelling and case. Unknown keys raise, naming the
    closest valid key in the same spelling."""
    lower = key.lower()
    if lower.startswith(PATTERN_PREFIX) and "." in key[len(PATTERN_PREFIX):]:
        pattern, _, last = key[len(PATTERN_PREFIX):].rpartition(".")
        found = _SPELLINGS.get(last.lower())
        if found is not None and found[1] == "plain" and KEYS[found[0]].scope not in ("home", "process"):
            return Spelled(found[0], "pattern", pattern)
        closest = _closest(last, [n for n in KEYS if KEYS[n].scope not in ("home", "process")])
        raise UnknownKeyError(key, value, closest and f"{PATTERN_PREFIX}{pattern}.{closest}")
    found = _SPELLINGS.get(lower)
    if found is not None:
        return Spelled(*found)
    form: Form = next((f for f, p in _PREFIXES.items() if p and lower.startswith(p)), "plain")
    candidates = [_PREFIXES[form] + name for name in KEYS] + (list(QPID_ALIASES) if form != "conf" else [])
    raise UnknownKeyError(key, secret_shown(key, value), _closest(key, candidates))


def setting_name(key: str, value: Any = None) -> str:
    """The setting a key names, in any of its spellings (:func:`spelled`)."""
    return spelled(key, value).name


def _closest(key: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def queue_setting(key: str, value: Any, allowed: Iterable[str] = QUEUE_KEYS) -> str:
    """The queue setting a key names, in any spelling; a producer's setting or any other key
    not in ``allowed`` raises, naming what is allowed."""
    name, allowed = setting_name(key, value), tuple(allowed)
    if name not in allowed:
        listed = "a queue setting here: " + ", ".join(allowed)
        if KEYS[name].scope == "producer":
            raise ProducerSettingError(key, value, name, listed)
        raise ConfigurationError(key, value, listed)
    return name


def home_setting(key: str, value: Any) -> str:
    """The home limit a key names (``homeStopCount``, ``spark.flow.homeStopCount``); any other
    key raises, naming the home's settings."""
    name = setting_name(key, value)
    if name not in HOME_KEYS:
        raise ConfigurationError(key, value, "a home setting: " + ", ".join(HOME_KEYS))
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


def _conf_entries(conf: Mapping[str, Any]) -> list[tuple[str, Spelled, Any]]:
    """The ``spark.flow.*`` settings of a Spark conf, each key known and each value valid
    (storage options are checked by :func:`~spark_flow.rules.storage_options.storage_options`)."""
    storage_options({key: value for key, value in conf.items() if key.lower().startswith(STORAGE_PREFIX)})
    entries = []
    for key, value in conf.items():
        if not key.lower().startswith(CONF_PREFIX) or key.lower().startswith(STORAGE_PREFIX):
            continue
        found = spelled(key, value)
        if found.form not in ("conf", "pattern"):
            raise UnknownKeyError(key, secret_shown(key, value), CONF_PREFIX + found.name)
        KEYS[found.name].parse(key, value)
        entries.append((key, found, value))
    return entries


def check_conf(conf: Mapping[str, Any]) -> None:
    """Every ``spark.flow.*`` key known and every value valid, before anything starts."""
    _conf_entries(conf)


def conf_settings(queue: str, conf: Mapping[str, Any], scope: Scope) -> dict[str, tuple[str, Any]]:
    """The settings of ``scope`` that a Spark conf gives explicitly for ``queue``, by name, each
    with the key it came from: ``spark.flow.<key>``, then ``spark.flow.queues.<pattern>.<key>``
    for matching patterns, more literal patterns last (they win). Built-in defaults are not in it."""
    entries = [(key, found, value) for key, found, value in _conf_entries(conf) if KEYS[found.name].scope == scope]
    found_settings = {found.name: (key, value) for key, found, value in entries if found.pattern is None}
    matching = [(key, found, value) for key, found, value in entries
                if found.pattern is not None and pattern_matches(found.pattern, queue)]
    for key, found, value in sorted(matching, key=lambda entry: _specificity(entry[1].pattern or "")):
        found_settings[found.name] = (key, value)
    return found_settings


def flow_conf(conf: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """The ``spark.flow.*`` entries of a Spark conf (``spark.conf.getAll`` or ``SparkConf.getAll()``)."""
    items = conf.items() if isinstance(conf, Mapping) else conf
    return {key: value for key, value in items if key.startswith(CONF_PREFIX)}


def producer_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The producer settings among a query's options, by name (Spark lower-cases data source
    options); a queue or home setting raises, naming where it belongs."""
    settings = {}
    for key, value in options.items():
        found = _SPELLINGS.get(key.lower())
        if found is None or found[1] != "plain":
            raise UnknownKeyError(key, value, _closest(key, PRODUCER_KEYS))
        name = found[0]
        if KEYS[name].scope == "home":
            raise ConfigurationError(key, value, "a producer setting here: " + ", ".join(PRODUCER_KEYS),
                                     f"{name} is a home setting: spark.flow.{name} in the Spark conf, or spark-flow "
                                     "set-home")
        if KEYS[name].scope == "process":
            raise ConfigurationError(key, value, "a producer setting here: " + ", ".join(PRODUCER_KEYS),
                                     f"{name} is the process's: spark.flow.{name} in the Spark conf")
        if KEYS[name].scope != "producer":
            raise QueueSettingError(name, value)
        settings[name] = value
    return settings


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
        lower = key.lower()
        if lower in canonical:
            mine[canonical[lower]] = value
        elif lower.startswith(STORAGE_PREFIX):
            conf[lower] = value  # deltalake's option names are lower-case anyway
        elif lower.startswith(CONF_PREFIX):
            conf[spelled(key, value).conf_key] = value
        elif lower in _SPELLINGS and _SPELLINGS[lower][1] == "plain":
            rest[key] = value
        else:
            raise UnknownKeyError(key, value, _closest(key, own + list(PRODUCER_KEYS)))
    check_conf(conf)
    return mine, producer_options(rest), conf
