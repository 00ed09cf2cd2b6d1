"""Settings in force: how a queue's, a home's and a producer's settings resolve.

A queue's flow state is one shared thing (docs/design.md 2.1), so its **queue settings** have one value
for every process: they are recorded with the queue (``flow.*`` table properties, Qpid's
``qpid.*`` declare arguments as aliases, and run-time settings) and resolve from those layers,
lowest first, over the defaults. A home's limits resolve the same way from the layers recorded
with the home. **Producer settings** belong to one query: its options > Spark conf > defaults.
Thresholds follow the Qpid C++ broker's rules (section 1 of the design), with errors naming
both keys. Keys and their spellings are :mod:`spark_flow.rules.keys`'; values are parsed by
:mod:`spark_flow.rules.units`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from spark_flow.exceptions import ConfigurationError
from spark_flow.rules.flow_state import Thresholds
from spark_flow.rules.keys import (
    HOME_KEYS,
    KEYS,
    PRODUCER_KEYS,
    QUEUE_KEYS,
    OnFull,
    Policy,
    conf_settings,
    home_setting,
    is_setting,
    producer_options,
    queue_setting,
)

#: The keys of each measure's stop, resume and max, in :class:`Thresholds`' order (count, size, age).
Limits = Sequence[tuple[str, str, str | None]]
_QUEUE_LIMITS: Limits = (("stopCount", "resumeCount", "maxCount"), ("stopSize", "resumeSize", "maxSize"),
                         ("stopAge", "resumeAge", None))
_HOME_LIMITS: Limits = (("homeStopCount", "homeResumeCount", None), ("homeStopSize", "homeResumeSize", None))


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
    pacing: bool = False
    stall_timeout: float = 0.0
    stalled_consumer_policy: str = "flag"
    message_ttl: float = 0.0
    max_deliveries: int = 0
    dead_letter_queue: str | None = None
    max_dead_letters_per_batch: int = 10
    values: Mapping[str, Any] = field(default_factory=dict, compare=False)
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def flow_controlled(self) -> bool:
        """Whether the queue's producers are flow-controlled at all (policy ``flow`` and
        ``producerFlowControl``): a home-wide stop holds them, whatever the queue's own thresholds."""
        return self.producer_flow_control and self.policy == "flow"


def _resolve(layers: Sequence[Mapping[str, Any]], names: Sequence[str],
             belongs: Callable[[str, Any], str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Each setting of ``names`` from recorded layers, lowest first, over its default, with where
    it came from (the key as written, or "default"). Keys are taken in any spelling; ``belongs``
    names the setting of a key or refuses it; keys of other systems (``delta.*``) are skipped."""
    values: dict[str, Any] = {name: KEYS[name].default for name in names}
    origins: dict[str, str] = dict.fromkeys(names, "default")
    for layer in layers:
        for key, raw in layer.items():
            if raw is None or not is_setting(key):
                continue
            name = belongs(key, raw)
            values[name], origins[name] = KEYS[name].parse(key, raw), key
    return values, origins


def queue_settings(queue: str, *layers: Mapping[str, Any]) -> QueueSettings:
    """Resolve a queue's settings from its recorded layers, lowest first (table properties, then
    run-time settings). Every value is checked, and so is the whole: Qpid's threshold rules with
    errors naming both keys, and a ring policy needs a max."""
    values, origins = _resolve(layers, QUEUE_KEYS, queue_setting)
    defaults = default_thresholds(values["maxCount"], values["maxSize"], values["defaultStopThreshold"],
                                  values["defaultResumeThreshold"])
    stop_pct, resume_pct = values["defaultStopThreshold"], values["defaultResumeThreshold"]
    if stop_pct and resume_pct > stop_pct:
        _raise_above(origins, "defaultResumeThreshold", resume_pct, "defaultStopThreshold", stop_pct)
    thresholds = _thresholds(values, origins, _QUEUE_LIMITS, defaults)
    if values["messageTtl"] and thresholds.stop_age >= values["messageTtl"]:
        _raise_above(origins, "stopAge", thresholds.stop_age, "messageTtl", values["messageTtl"],
                     "messages expire before they are that old, so the age would never stop the flow", strict=True)
    if values["policy"].startswith("ring") and not (values["maxCount"] or values["maxSize"]):
        raise ConfigurationError(origins["policy"], values["policy"], "a ring policy with maxCount or maxSize above 0",
                                 "A ring queue discards its oldest messages beyond its max: give it one")
    flow_controlled = values["producerFlowControl"] and values["policy"] == "flow"
    if values["pacing"] and not (flow_controlled and thresholds.stop_count):
        raise ConfigurationError(origins["pacing"], "true", "pacing with a stopCount (or maxCount) above 0, "
                                 "policy flow and producerFlowControl true",
                                 "A paced queue steers its depth between its resume and stop counts")
    return QueueSettings(
        queue=queue,
        thresholds=thresholds if flow_controlled else Thresholds(),
        max_count=values["maxCount"],
        max_size=values["maxSize"],
        policy=values["policy"],
        producer_flow_control=values["producerFlowControl"],
        producers_stopped=values["producersStopped"],
        pacing=values["pacing"],
        stall_timeout=values["stallTimeout"],
        stalled_consumer_policy=values["stalledConsumerPolicy"],
        message_ttl=values["messageTtl"],
        max_deliveries=values["maxDeliveries"],
        dead_letter_queue=values["deadLetterQueue"],
        max_dead_letters_per_batch=values["maxDeadLettersPerBatch"],
        values=values,
        origins=origins,
    )


def home_thresholds(*layers: Mapping[str, Any]) -> Thresholds:
    """A home's limits (``homeStopCount``, ...) from its recorded layers, lowest first. The rules
    are a queue's (a resume of 0 means the stop, a resume above its stop is an error naming both
    keys); a home has no max and no default percentages, so no limit unless one is given."""
    values, origins = _resolve(layers, HOME_KEYS, home_setting)
    return _thresholds(values, origins, _HOME_LIMITS, Thresholds())


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


def _thresholds(values: Mapping[str, Any], origins: Mapping[str, str], limits: Limits,
                defaults: Thresholds) -> Thresholds:
    """Qpid's rules: the defaults fill every threshold, each explicit threshold replaces its own
    value only; then per measure with a stop, a resume of 0 means the stop (no queue is held
    forever at depth 0), and a resume above the stop or a stop above the max is an error."""
    default = [defaults.stop_count, defaults.resume_count, defaults.stop_size, defaults.resume_size,
               defaults.stop_age, defaults.resume_age]
    chosen: list[Any] = []
    for i, (stop, resume, maximum) in enumerate(limits):
        stop_value = values[stop] if values[stop] is not None else default[2 * i]
        resume_value = values[resume] if values[resume] is not None else default[2 * i + 1]
        if not stop_value:
            resume_value = stop_value  # 0: the measure is not used
        elif maximum and values[maximum] and stop_value > values[maximum]:
            _raise_above(origins, stop, stop_value, maximum, values[maximum], "a stop threshold above the max "
                         "is never reached before the queue is full")
        elif not resume_value:
            resume_value = stop_value
        elif resume_value > stop_value:
            _raise_above(origins, resume, resume_value, stop, stop_value)
        chosen += [stop_value, resume_value]
    return Thresholds(*chosen)


def _raise_above(origins: Mapping[str, str], key: str, value: Any, limit_key: str, limit: Any,
                 why: str = "a resume threshold above its stop threshold locks flow control on", *,
                 strict: bool = False) -> None:
    def spelled(name: str) -> str:
        origin = origins.get(name, "default")
        return f"{name} (default)" if origin == "default" else origin

    def shown(amount: Any) -> str:
        return f"{amount:g}s" if isinstance(amount, float) else str(amount)  # ages are seconds

    bound = "<" if strict else "<="
    raise ConfigurationError(spelled(key), shown(value), f"a value {bound} {spelled(limit_key)}={shown(limit)} ({why})")


@dataclass(frozen=True)
class ProducerSettings:
    """One producer's settings: its capacity window, what it does while its queue is
    flow-stopped (hold, reject, reject-after), its publish rate (messages and bytes per second,
    0 = no limit) and its weight in a paced queue's shares, parsed once where the sink is made."""

    capacity: int = 10_000
    on_full: OnFull = "hold"
    reject_timeout: float = 30.0
    poll_interval: float = 1.0
    msg_publish_rate: int = 0
    byte_publish_rate: int = 0
    pacing_weight: int = 1


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
    return ProducerSettings(values["capacity"], values["onFull"], values["rejectTimeout"], values["pollInterval"],
                            values["msgPublishRate"], values["bytePublishRate"], values["pacingWeight"])
