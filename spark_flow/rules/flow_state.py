"""The flow state machine of one queue (or subscription), as the Qpid C++ broker defines it.

Pure Python with no Spark import: the sink, the gated source and the controller all step the
same machine, so the rule is written once and tested message by message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from spark_flow.rules.columns import Column


@dataclass(frozen=True)
class Thresholds:
    """Flow stop and resume thresholds of a queue; 0 means that measure is not used.

    Three measures of a backlog: its count, its size in bytes, and its age in seconds (how long
    the oldest unacknowledged message has waited, as Pulsar's backlog quota ``limitTime``). A
    measure is configured when its stop threshold is above 0. Flow turns ON when any configured
    measure goes above its stop threshold, and OFF again only when every configured measure is
    below its resume threshold (strict comparisons, as Qpid's ``QueueFlowLimit``).
    """

    stop_count: int = 0
    resume_count: int = 0
    stop_size: int = 0
    resume_size: int = 0
    stop_age: float = 0.0
    resume_age: float = 0.0

    def __post_init__(self) -> None:
        for name in ("stop_count", "resume_count", "stop_size", "resume_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}={value!r} is not valid: allowed is an integer >= 0")
        for name in ("stop_age", "resume_age"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name}={value!r} is not valid: allowed is a number of seconds >= 0")
        for stop, resume in (("stop_count", "resume_count"), ("stop_size", "resume_size"), ("stop_age", "resume_age")):
            if getattr(self, stop) and getattr(self, resume) > getattr(self, stop):
                raise ValueError(
                    f"{resume}={getattr(self, resume)} is above {stop}={getattr(self, stop)}: "
                    f"allowed is {resume} <= {stop}"
                )

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Thresholds:
        """The thresholds a status, history or observation row carries (under these field names)."""
        def value(name: str) -> Any:
            return row.get(name) or 0

        return cls(int(value("stop_count")), int(value("resume_count")), int(value("stop_size")),
                   int(value("resume_size")), float(value("stop_age")), float(value("resume_age")))

    @property
    def enabled(self) -> bool:
        """Whether the queue has flow control at all (a stop threshold above 0)."""
        return self.stop_count > 0 or self.stop_size > 0 or self.stop_age > 0

    def exceeded(self, count: int, size: int, age: float = 0.0) -> bool:
        """Whether a backlog of ``count`` messages and ``size`` bytes whose oldest message has
        waited ``age`` seconds turns flow ON."""
        return (0 < self.stop_count < count) or (0 < self.stop_size < size) or (0 < self.stop_age < age)

    def relieved(self, count: int, size: int, age: float = 0.0) -> bool:
        """Whether a backlog is under every configured resume threshold, so flow may turn OFF."""
        count_ok = not self.stop_count or count < self.resume_count
        size_ok = not self.stop_size or size < self.resume_size
        age_ok = not self.stop_age or age < self.resume_age
        return count_ok and size_ok and age_ok


#: The names of the thresholds, as status, history and observation rows carry them.
THRESHOLD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Thresholds))
#: The thresholds as every record that carries them writes them (status, history, transitions, the
#: controller's observations and rows): counts and sizes as BIGINT, ages in seconds as DOUBLE.
THRESHOLD_COLUMNS: tuple[Column, ...] = tuple(Column(f.name, "bigint" if f.type == "int" else "double")
                                              for f in fields(Thresholds))


@dataclass(frozen=True)
class FlowState:
    """The state a queue's management object shows: ``flowStopped`` and ``flowStoppedCount``."""

    flow_stopped: bool = False
    flow_stopped_count: int = 0

    def observe(self, thresholds: Thresholds, count: int, size: int, age: float = 0.0) -> FlowState:
        """Return the state after observing a depth of ``count`` messages and ``size`` bytes
        whose oldest message has waited ``age`` seconds (0 when none waits).

        OFF -> ON when a stop threshold is exceeded (and counts the activation);
        ON -> OFF when every configured measure is under its resume threshold.
        Thresholds changed at run time apply from this observation on.
        """
        if not thresholds.enabled:
            return replace(self, flow_stopped=False)
        if not self.flow_stopped and thresholds.exceeded(count, size, age):
            return FlowState(True, self.flow_stopped_count + 1)
        if self.flow_stopped and thresholds.relieved(count, size, age):
            return replace(self, flow_stopped=False)
        return self


def producers_held(*, flow_stopped: Iterable[bool], producers_stopped: bool, home_stopped: bool = False) -> bool:
    """Whether a queue holds its producers: any of its subscriptions is flow-stopped, an operator
    stopped its producers, or its home is flow-stopped (when the queue's producers are
    flow-controlled). Gates, gated sources, the controller and the status all ask this."""
    return producers_stopped or home_stopped or any(flow_stopped)
