"""Why a queue holds its producers: the pipeline as a graph (queues joined by what their
consumers write, their subscriptions' ``downstream``) and the stage that causes a hold.

A queue holds its producers when a subscription is flow-stopped, an operator stopped them, or
its home is flow-stopped (:func:`~spark_flow.rules.flow_state.producers_held`). A flow-stopped
subscription whose consumer writes to a queue that holds its producers is backpressured: the
cause is further down, so the explanation follows it there. The root cause is the deepest stage
whose own consumer is not backpressured (slow, stalled, or not running), or an operator's stop,
or the home's limits. ``spark-flow why`` prints it and the console marks the same stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_flow.ops.view import HomeView, QueueView, SubscriptionView, iso_time


@dataclass(frozen=True)
class Stage:
    """One queue on the way from a held producer to the cause: ``level`` 0 is the queue asked
    about; ``causes`` says what at this stage holds (empty when it is held only by queues
    further down, ``backpressured_by``)."""

    queue: str
    level: int
    held: bool
    reasons: tuple[str, ...]
    backpressured_by: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()

    @property
    def root_cause(self) -> bool:
        return bool(self.causes)

    def line(self) -> str:
        """The stage as ``spark-flow why`` prints it."""
        if not self.held:
            return f"{'  ' * self.level}{self.queue}: {'; '.join(self.reasons)}"
        parts = [f"{self.queue}: holds its producers: {'; '.join(self.reasons)}"]
        if self.backpressured_by:
            parts.append(f"its consumer is backpressured by {', '.join(self.backpressured_by)}")
        parts += [f"root cause: {cause}" for cause in self.causes]
        return "  " * self.level + "; ".join(parts)


def explain(view: HomeView, queue: str) -> list[Stage]:
    """The stages from ``queue`` (registered by name, or a downstream queue by path) to the
    root causes of its hold, depth first; one stage saying so when it does not hold."""
    start = view.queue(queue)
    if start is None:
        from spark_flow.exceptions import QueueNotFoundError

        raise QueueNotFoundError(queue, f"not registered in {view.home}: allowed is one of "
                                        f"{', '.join(map(repr, view.queues)) or 'none (declare one)'}")
    stages: list[Stage] = []
    _follow(view, start, 0, set(), stages)
    return stages


def _follow(view: HomeView, queue: QueueView, level: int, seen: set[str], stages: list[Stage]) -> None:
    seen.add(queue.name)
    if queue.error is not None:
        stages.append(Stage(queue.name, level, False, (f"cannot be read: {queue.error}",)))
        return
    if not queue.held:
        depth = queue.depth
        pace = queue.pace
        paced = () if pace is None else (
            f"paced: producers admitted at {pace.rate:.1f} messages/s, drained at "
            f"{'?' if pace.drain is None else f'{pace.drain:.1f}'} messages/s, shared by {pace.producers}",)
        stages.append(Stage(queue.name, level, False, (f"does not hold its producers (depth {depth.count} messages, "
                                                      f"{depth.size} bytes; {_limits(queue)})", *paced)))
        return
    reasons, causes, below = [], [], []
    if queue.producers_stopped:
        reasons.append("stopped by an operator (stop-producers)")
        causes.append("an operator's stop-producers (start-producers undoes it)")
    if queue.home_stopped:
        reasons.append(f"its home {view.home} is flow-stopped by its home-wide limits")
        causes.append(f"the home's depth ({view.depth.count} messages, {view.depth.size} bytes) over its limits "
                      f"({view.limits})")
    for sub in (s for s in queue.subscriptions if s.flow_stopped):
        reasons.append(f"subscription {sub.name} flow-stopped (depth {sub.depth.count} messages, "
                       f"{sub.depth.size} bytes; {_limits(queue)})")
        holding = [name for name in sub.downstream if (down := view.queue(name)) is not None and down.held]
        if holding:
            below += [name for name in holding if name not in below]
            causes += [f"a cycle: {name}, above, waits on this stage too" for name in holding if name in seen]
        else:
            causes.append(_consumer(sub))
    stages.append(Stage(queue.name, level, True, tuple(reasons), tuple(below), tuple(causes)))
    for name in below:
        down = view.queue(name)
        if down is not None and name not in seen:
            _follow(view, down, level + 1, seen, stages)


def _limits(queue: QueueView) -> str:
    t = queue.thresholds
    parts = [f"stop {t.stop_count} / resume {t.resume_count} messages" if t.stop_count else "",
             f"stop {t.stop_size} / resume {t.resume_size} bytes" if t.stop_size else "",
             f"stop {t.stop_age:g}s / resume {t.resume_age:g}s of age" if t.stop_age else ""]
    return ", ".join(p for p in parts if p) or "no thresholds"


def _consumer(sub: SubscriptionView) -> str:
    """What a consumer that is not backpressured is doing, from its acknowledgements."""
    state = "stalled" if sub.stalled else "not backpressured (slow, or not running)"
    acknowledged = f"last acknowledgement at {iso_time(sub.acked_at)}" if sub.acked_at is not None else "never acknowledged"
    return f"the consumer of subscription {sub.name} is {state}: oldest message waits {_duration(sub.age)}, {acknowledged}"


def _duration(seconds: float) -> str:
    """``42s``, ``12 min``, ``3 h 5 min``: how long, as an operator reads it."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"


def root_causes(view: HomeView) -> dict[str, list[str]]:
    """Every stage that is a root cause of some held queue's hold, with its causes: what the
    console marks."""
    found: dict[str, list[str]] = {}
    for queue in view.queues.values():
        if queue.held:
            for stage in explain(view, queue.name):
                for cause in stage.causes:
                    if cause not in found.setdefault(stage.queue, []):
                        found[stage.queue].append(cause)
    return found


def edges(view: HomeView) -> list[tuple[str, str, str, bool]]:
    """The pipeline's edges: (queue, subscription, downstream queue, whether that downstream
    queue holds its producers, i.e. backpressures the consumer)."""
    found = []
    for queue in [*view.queues.values(), *view.others.values()]:
        for sub in queue.subscriptions:
            for name in sub.downstream:
                down = view.queue(name)
                found.append((queue.name, sub.name, name, down is not None and down.held))
    return found
