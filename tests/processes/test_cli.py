"""The ``spark-flow`` command line on a real home: declare, status, set, stop/start, plot, errors."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.short_processes
def test_console_script_without_home_names_the_option(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "spark-flow"
    result = subprocess.run([str(script), "status"], capture_output=True, text=True, timeout=120,
                            env={"PATH": str(script.parent)})
    assert result.returncode == 2
    assert "--home=None is not valid" in result.stderr and "SPARK_FLOW_HOME" in result.stderr


@pytest.mark.parametrize(("argv", "status"), [
    (["subscriptions", "orders.eu"], 0),
    (["status"], 0),
    (["stop-producers", "ev*"], 2),
    (["set", "orders.eu", "stopCount=abc"], 2),
], ids=["subscriptions", "status", "refused-stop-producers", "refused-set"])
@pytest.mark.short_processes
def test_console_script_exit_status_is_the_same_every_time(cli_home: str, argv: list[str], status: int) -> None:
    """The exit status is a contract for scripts: 0 when the command did its work, 2 when it
    refused, in each of 12 runs (deltalake's native threads must not abort the interpreter at
    exit, delta-io/delta-rs#2184), 4 runs at a time."""
    from concurrent.futures import ThreadPoolExecutor

    script = Path(sys.executable).parent / "spark-flow"

    def run(_: int) -> tuple[int, str]:
        result = subprocess.run([str(script), "--home", cli_home, *argv], capture_output=True, text=True, timeout=120)
        return result.returncode, result.stderr[-300:]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(12)))
    assert [code for code, _ in results] == [status] * 12, [r for r in results if r[0] != status][:2]


@pytest.mark.short_processes
def test_console_script_remote_refused_or_unreachable_is_one_line(tmp_path: Path) -> None:
    """A malformed ``--remote`` (or ``$SPARK_REMOTE``) is refused, exit status 2; a Spark Connect
    server that does not answer is one line within seconds (PySpark's client would retry for ten
    minutes), exit status 1. Each names where the URL came from and what is allowed, shows no
    traceback and no token."""
    from support.servers import free_port

    script = Path(sys.executable).parent / "spark-flow"
    port = free_port()
    cases = [
        (["--remote", "http://127.0.0.1:15002"], {}, 2,
         "--remote='http://127.0.0.1:15002' is not valid: allowed is sc://host[:port]"),
        ([], {"SPARK_REMOTE": "sc://127.0.0.1:15002/path"}, 2,
         "$SPARK_REMOTE='sc://127.0.0.1:15002/path' is not valid: allowed is sc://host[:port]"),
        (["--remote", f"sc://127.0.0.1:{port}/;token=s3cr3t-Never-Shown"], {}, 1,
         f"--remote='sc://127.0.0.1:{port}/;token=***': no Spark Connect server answered there (failed to connect"),
    ]
    for options, env, status, said in cases:
        started = time.monotonic()
        result = subprocess.run([str(script), *options, "--home", str(tmp_path / "home"), "status"], capture_output=True,
                                text=True, timeout=60, env={"PATH": str(script.parent), **env})
        assert (result.returncode, result.stdout) == (status, ""), result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith(f"spark-flow status: error: {said}"), line
        assert "s3cr3t" not in line and time.monotonic() - started < 30
