"""The flow state machine of one queue (or subscription), as the Qpid C++ broker defines it.

Pure Python with no Spark import: the sink, the gated source and the controller all step the
same machine, so the rule is written once and tested message by message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Thresholds:
    """Flow stop and resume thresholds of a queue; 0 means that measure is not used.

    A measure is configured when its stop threshold is above 0. Flow turns ON when any configured
    measure goes above its stop threshold, and OFF again only when every configured measure is
    below its resume threshold (strict comparisons, as Qpid's ``QueueFlowLimit``).
    """

    stop_count: int = 0
    resume_count: int = 0
    stop_size: int = 0
    resume_size: int = 0

    def __post_init__(self) -> None:
        for name in ("stop_count", "resume_count", "stop_size", "resume_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}={value!r} is not valid: allowed is an integer >= 0")
        for stop, resume in (("stop_count", "resume_count"), ("stop_size", "resume_size")):
            if getattr(self, stop) and getattr(self, resume) > getattr(self, stop):
                raise ValueError(
                    f"{resume}={getattr(self, resume)} is above {stop}={getattr(self, stop)}: "
                    f"allowed is {resume} <= {stop}"
                )

    @property
    def enabled(self) -> bool:
        """Whether the queue has flow control at all (a stop threshold above 0)."""
        return self.stop_count > 0 or self.stop_size > 0

    def exceeded(self, count: int, size: int) -> bool:
        """Whether a depth of ``count`` messages and ``size`` bytes turns flow ON."""
        return (0 < self.stop_count < count) or (0 < self.stop_size < size)

    def relieved(self, count: int, size: int) -> bool:
        """Whether a depth is under every configured resume threshold, so flow may turn OFF."""
        count_ok = not self.stop_count or count < self.resume_count
        size_ok = not self.stop_size or size < self.resume_size
        return count_ok and size_ok


@dataclass(frozen=True)
class FlowState:
    """The state a queue's management object shows: ``flowStopped`` and ``flowStoppedCount``."""

    flow_stopped: bool = False
    flow_stopped_count: int = 0

    def observe(self, thresholds: Thresholds, count: int, size: int) -> FlowState:
        """Return the state after observing a depth of ``count`` messages and ``size`` bytes.

        OFF -> ON when a stop threshold is exceeded (and counts the activation);
        ON -> OFF when every configured measure is under its resume threshold.
        Thresholds changed at run time apply from this observation on.
        """
        if not thresholds.enabled:
            return replace(self, flow_stopped=False)
        if not self.flow_stopped and thresholds.exceeded(count, size):
            return FlowState(True, self.flow_stopped_count + 1)
        if self.flow_stopped and thresholds.relieved(count, size):
            return replace(self, flow_stopped=False)
        return self
