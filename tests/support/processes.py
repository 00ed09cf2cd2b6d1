"""Helpers for tests that run the jobs as processes: spark-submit (the jobs' own launcher,
``jobs/_common.start_job``), a job in a terminal of its own ended by Ctrl-C, the jobs' progress
lines, and a failed run's output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from _common import ROOT, start_job

from spark_flow.flow.queue import Queue
from support.streams import wait_until

__all__ = ["ROOT", "SPARK_FLOW", "Terminal", "ctrl_c_once_held", "failure", "in_terminal", "progress", "spark_flow_serve",
           "spark_submit", "warnings"]

#: The command line, as the package installs it beside the interpreter.
SPARK_FLOW = Path(sys.executable).parent / "spark-flow"
LINE = re.compile(r"(\w+)=(\S+)")
WARNING = re.compile(r"\b\w*Warning\b: ")


def spark_submit(job: str, *args: str, conf: dict[str, str] | None = None, remote: str | None = None,
                 timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``jobs/<job>.py`` through the venv's spark-submit on a local[1] session (the preset) to
    its end; the driver and workers run this interpreter. With ``remote``, as a Spark Connect
    client of that server; ``env`` goes over this process's environment. A job not ended within
    ``timeout`` seconds is killed (its whole process group: spark-submit's JVM, the Python driver
    and workers) and fails the test with what it printed."""
    with start_job(job, *args, conf=conf, remote=remote, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            run = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
            raise AssertionError(f"the {job} job did not end within {timeout} s\n{failure(run)}") from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


class Terminal:
    """A job running in a terminal of its own (its process group): what it printed so far, and
    its end by Ctrl-C (SIGINT to the group, as the terminal sends it)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(pipe, lines), daemon=True)
                        for pipe, lines in ((process.stdout, self.out), (process.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @classmethod
    def start(cls, command: list[str], env: Mapping[str, str]) -> Terminal:
        """``command`` (a README line's words) started in the repository with ``env``."""
        return cls(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True))

    @staticmethod
    def _read(pipe: IO[str], lines: list[str]) -> None:
        for line in pipe:
            lines.append(line)

    def stdout(self) -> str:
        return "".join(self.out)

    def wait_for(self, seen: Callable[[], bool], timeout: float = 240) -> None:
        """Wait until ``seen()``, the job still running; a job that ended, or ``seen()`` not
        within ``timeout`` seconds, fails the test with the job's output (ended by Ctrl-C)."""
        def running_and_seen() -> bool:
            assert self.process.poll() is None, failure(self.ctrl_c())
            return seen()

        try:
            wait_until(running_and_seen, timeout, interval=0.5)
        except AssertionError as error:
            if self.process.poll() is not None:
                raise
            raise AssertionError(f"{error}\n{failure(self.ctrl_c())}") from None

    def ctrl_c_once(self, seen: Callable[[], bool], timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """Wait until ``seen()`` (the job still running), then end it by Ctrl-C: a run that ends
        when it has shown what it is for, however slow the machine."""
        self.wait_for(seen, timeout)
        return self.ctrl_c()

    def ctrl_c(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Ctrl-C (unless it ended already), then its result; killed if it has not ended within
        ``timeout`` seconds."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for reader in self.readers:
            reader.join(30)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, self.stdout(), "".join(self.err))


def in_terminal(job: str, *args: str, conf: dict[str, str] | None = None, remote: str | None = None,
                env: dict[str, str] | None = None) -> Terminal:
    """``jobs/<job>.py`` started as :func:`spark_submit` runs it, in a terminal of its own: a run
    that ends when the test has seen what it waits for (:meth:`Terminal.ctrl_c`)."""
    return Terminal(start_job(job, *args, conf=conf, remote=remote, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True))


def ctrl_c_once_held(producer: Terminal, path: str, options: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """End ``producer`` by Ctrl-C once its queue at ``path`` holds its producers (the queue's
    state, read with ``options``): its result."""
    def held() -> bool:
        try:
            return Queue(path, options).subscriptions.get("default").flow_stopped
        except LookupError:  # not declared yet
            return False

    return producer.ctrl_c_once(held)


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


@contextmanager
def spark_flow_serve(*args: str, env: Mapping[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``spark-flow ARGS... serve --port 0`` as its users start it (in ``env``, else this
    process's environment); the process and its URL. Stopped with its process group at the end."""
    process = subprocess.Popen([str(SPARK_FLOW), *args, "serve", "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env=dict(env) if env is not None else None)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("spark-flow serve: http://127.0.0.1:"), line + process.stderr.read()  # type: ignore[union-attr]
        yield process, line.split()[2]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
