"""A picture of flow control: queue depth over time against the stop and resume thresholds,
with the intervals where producers were flow-stopped shaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_flow.state import Thresholds


@dataclass(frozen=True)
class Sample:
    """One look at a queue: seconds since the start, depth in messages, whether producers were
    held, and the count thresholds in force then (None: the plot's fixed thresholds)."""

    seconds: float
    depth: int
    flow_stopped: bool
    stop_count: int | None = None
    resume_count: int | None = None


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
        samples = [Sample(s.seconds, s.depth, s.flow_stopped, thresholds.stop_count, thresholds.resume_count)
                   for s in samples]
    if any(s.stop_count for s in samples):
        for attr, color, name in (("stop_count", "tab:red", "stop"), ("resume_count", "tab:green", "resume")):
            values = [getattr(s, attr) or None for s in samples]
            shown = sorted({v for v in values if v})
            ax.step(times, values, where="post", color=color, linestyle="--",
                    label=f"{name} {'/'.join(map(str, shown))}")
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
        points.append(Sample((row["time"] - start).total_seconds(), row["depth_count"],
                             bool(row["flow_stopped"]) or manual, row["stop_count"], row["resume_count"]))
    return points
