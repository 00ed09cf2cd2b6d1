"""Helpers for tests that run the jobs as processes: spark-submit (the jobs' own launcher,
``jobs/_common.start_job``), the jobs' progress lines, and a failed run's output."""

from __future__ import annotations

import re
import subprocess

from _common import ROOT, start_job

__all__ = ["ROOT", "failure", "progress", "spark_submit", "warnings"]

LINE = re.compile(r"(\w+)=(\S+)")
WARNING = re.compile(r"\b\w*Warning\b: ")


def spark_submit(job: str, *args: str, conf: dict[str, str] | None = None, remote: str | None = None,
                 timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``jobs/<job>.py`` through the venv's spark-submit on a local[1] session (the preset) to
    its end; the driver and workers run this interpreter. With ``remote``, as a Spark Connect
    client of that server; ``env`` goes over this process's environment."""
    with start_job(job, *args, conf=conf, remote=remote, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def progress(stdout: str, kind: str) -> list[dict[str, str]]:
    """The per-batch progress lines of a job's stdout, as key=value dicts."""
    lines = [line for line in stdout.splitlines() if f" {kind}=" in line and " batch=" in line]
    return [dict(LINE.findall(line)) for line in lines]


def warnings(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The Python warnings a run printed (``FutureWarning: ...``), which its user would see too."""
    return [line for line in (result.stdout + result.stderr).splitlines() if WARNING.search(line)]


def failure(result: subprocess.CompletedProcess[str]) -> str:
    """A failed run's exit status and the ends of its output, for an assertion's message."""
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"
