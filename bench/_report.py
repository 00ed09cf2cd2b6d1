"""What the benchmarks share: their command line's start, the machine a report ran on, and the
report's end (JSON, the samples beside it, a PNG); and, from jobs/_common.py (its folder put on
``sys.path`` here, as the jobs have it), the local session preset and the jobs' launcher."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
from _common import SlowConsumer, append_once, local_conf, start_job

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["SlowConsumer", "append_once", "figure", "local_conf", "machine", "parser", "start_job", "write_report"]


def parser(doc: str | None, out: str) -> argparse.ArgumentParser:
    """A benchmark's argument parser: its docstring as the description, and ``--out`` (the
    report's JSON; the PNG and samples go beside it)."""
    args = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--out", default=out, help=f"the report (JSON; the PNG beside it) (default: {out})")
    return args


def machine() -> dict[str, Any]:
    """The machine, as a report's ``machine`` entry: call it at the start (the load then)."""
    return {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}


def figure(ncols: int = 1, figsize: tuple[float, float] = (10, 5), nrows: int = 1) -> tuple[Figure, Any]:
    """A new figure of ``ncols`` plots side by side, in ``nrows`` rows (matplotlib without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize, dpi=110)


def write_report(out: str | Path, report: dict[str, Any], chart: Figure, samples: object = None) -> None:
    """Write ``report`` as JSON at ``out``, ``samples`` (the curves, to re-plot without running
    again) at ``<out>_samples.json`` and ``chart`` at ``<out>.png``; print the report and the
    files written."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = [out]
    out.write_text(json.dumps(report, indent=2, default=str))
    if samples is not None:
        written.append(out.with_name(out.stem + "_samples.json"))
        written[-1].write_text(json.dumps(samples, default=str))
    written.append(out.with_suffix(".png"))
    chart.tight_layout()
    chart.savefig(written[-1])
    plt.close(chart)
    print(json.dumps(report, indent=2, default=str))
    print(f"wrote {', '.join(str(path) for path in written)}")
