"""A picture of flow control: queue depth over time against the stop and resume thresholds,
with the intervals where producers were flow-stopped shaded; for a queue with an age limit,
the oldest message's age against ``stopAge`` / ``resumeAge`` on a second axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spark_flow.rules.flow_state import Thresholds


@dataclass(frozen=True)
class Sample:
    """One look at a queue: seconds since the start, depth in messages, whether producers were
    held, and the count thresholds in force then (None: the plot's fixed thresholds); the
    oldest message's age and the age thresholds, in seconds."""

    seconds: float
    depth: int
    flow_stopped: bool
    stop_count: int | None = None
    resume_count: int | None = None
    age: float | None = None
    stop_age: float | None = None
    resume_age: float | None = None


def plot_depth(samples: Sequence[Sample], thresholds: Thresholds | None, path: str | Path, title: str = "") -> Path:
    """Draw ``samples`` as a step line with the thresholds and shaded stopped intervals; write a PNG.

    With ``thresholds`` the stop and resume lines are fixed; without, they follow the samples'
    own thresholds (changed at run time by ``spark-flow set``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    times = [s.seconds for s in samples]
    ax.step(times, [s.depth for s in samples], where="post", color="tab:blue", label="depth (messages)")
    if thresholds is not None:
        samples = [replace(s, stop_count=thresholds.stop_count, resume_count=thresholds.resume_count,
                           stop_age=thresholds.stop_age, resume_age=thresholds.resume_age) for s in samples]
    _threshold_lines(ax, samples, ("stop_count", "resume_count"), ("stop", "resume"), "")
    if any(s.stop_age for s in samples):
        ages = ax.twinx()
        ages.step(times, [s.age or 0.0 for s in samples], where="post", color="tab:purple",
                  label="oldest message age (s)")
        _threshold_lines(ages, samples, ("stop_age", "resume_age"), ("stopAge", "resumeAge"), "s")
        ages.set_ylabel("seconds")
        ages.set_ylim(bottom=0)
        ages.legend(loc="upper left", fontsize="small")
    start = None
    for sample in samples:
        if sample.flow_stopped and start is None:
            start = sample.seconds
        elif not sample.flow_stopped and start is not None:
            ax.axvspan(start, sample.seconds, color="tab:red", alpha=0.12, lw=0)
            start = None
    if start is not None and times:
        ax.axvspan(start, times[-1], color="tab:red", alpha=0.12, lw=0)
    ax.plot([], [], color="tab:red", alpha=0.3, linewidth=8, label="producers held")
    ax.set_xlabel("seconds")
    ax.set_ylabel("messages")
    ax.set_title(title or "queue depth and flow control")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def _threshold_lines(ax: Any, samples: Sequence[Sample], attrs: tuple[str, str], names: tuple[str, str],
                     unit: str) -> None:
    """The stop (red) and resume (green) thresholds as they were at each sample, dashed."""
    if not any(getattr(s, attrs[0]) for s in samples):
        return
    for attr, color, name in zip(attrs, ("tab:red", "tab:green"), names, strict=True):
        values = [getattr(s, attr) or None for s in samples]
        shown = sorted({v for v in values if v})
        labels = [f"{v:g}{unit}" if unit else str(v) for v in shown]
        ax.step([s.seconds for s in samples], values, where="post", color=color, linestyle=":" if unit else "--",
                label=f"{name} {'/'.join(labels)}")


def depth_points(samples: Sequence[Mapping[str, Any]], transitions: Sequence[Mapping[str, Any]]) -> list[Sample]:
    """The controller's samples merged with the queue's transition records, in time order, from
    the first sample on: a transition record carries the depth at the very moment of a stop or
    resume, which periodic samples may miss. Producers count as held while flow-stopped or
    stopped by an operator: a transition record has no ``producers_stopped``, so it carries the
    last sample's forward."""
    start = samples[0]["time"]
    points, manual = [], False
    rows = [*samples, *(r for r in transitions if r["time"] >= start)]
    for row in sorted(rows, key=lambda r: r["time"]):
        manual = bool(row.get("producers_stopped", manual))
        age = row.get("oldest_message_age_seconds", row.get("depth_age"))  # a sample's, a transition's
        points.append(Sample((row["time"] - start).total_seconds(), row["depth_count"],
                             bool(row["flow_stopped"]) or manual, row["stop_count"], row["resume_count"],
                             age, row.get("stop_age"), row.get("resume_age")))
    return points
