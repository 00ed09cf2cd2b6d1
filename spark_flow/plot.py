"""A picture of flow control: queue depth over time against the stop and resume thresholds,
with the intervals where producers were flow-stopped shaded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spark_flow.state import Thresholds


@dataclass(frozen=True)
class Sample:
    """One look at a queue: seconds since the start, depth in messages, and the flow state."""

    seconds: float
    depth: int
    flow_stopped: bool


def plot_depth(samples: Sequence[Sample], thresholds: Thresholds, path: str | Path, title: str = "") -> Path:
    """Draw ``samples`` as a step line with the thresholds and shaded stopped intervals; write a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    times = [s.seconds for s in samples]
    ax.step(times, [s.depth for s in samples], where="post", color="tab:blue", label="depth (messages)")
    if thresholds.stop_count:
        ax.axhline(thresholds.stop_count, color="tab:red", linestyle="--", label=f"stop {thresholds.stop_count}")
        ax.axhline(thresholds.resume_count, color="tab:green", linestyle="--",
                   label=f"resume {thresholds.resume_count}")
    start = None
    for sample in samples:
        if sample.flow_stopped and start is None:
            start = sample.seconds
        elif not sample.flow_stopped and start is not None:
            ax.axvspan(start, sample.seconds, color="tab:red", alpha=0.12, lw=0)
            start = None
    if start is not None and times:
        ax.axvspan(start, times[-1], color="tab:red", alpha=0.12, lw=0)
    ax.plot([], [], color="tab:red", alpha=0.3, linewidth=8, label="producers flow-stopped")
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
