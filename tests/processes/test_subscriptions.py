"""The subscriptions table with other processes: a reader's claim taken over from a process that
is ending, and a source's fresh Python process using the table without importing pandas (the
table itself: tests/pure/test_subscriptions.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from spark_flow.exceptions import SubscriptionInUseError
from spark_flow.records.subscriptions import SubscriptionTable, process_gone


@pytest.mark.short_processes
def test_claim_takes_over_a_reader_whose_process_is_ending(subs: SubscriptionTable) -> None:
    """Spark ends a source's Python process with SIGTERM (Java's ``Process.destroy``) and
    returns from ``query.stop()`` without waiting: a reader whose process still frees its memory,
    or has ended and is not reaped yet, is gone (CI: ``delete_queue(if_unused=True)`` right
    after the README's queries stopped was refused, its reader "seen 1.1s ago")."""
    subs.create("default", 0)
    script = ("import sys; from spark_flow.records.subscriptions import SubscriptionTable as T; "
              f"T({subs.location!r}, 'q').claim('default', 'query-a', 60); "
              "heap = bytearray(512 << 20); heap[::4096] = bytes(len(heap[::4096])); "  # so its exit takes a while
              "print('claimed', flush=True); sys.stdin.read()")
    reader = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "claimed\n"
        with pytest.raises(SubscriptionInUseError, match="query-a"):
            subs.claim("default", "query-b", timeout=60)
        reader.terminate()
        subs.claim("default", "query-b", timeout=60)  # while it exits
        assert subs.get("default").reader == "query-b"
        os.waitid(os.P_PID, reader.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
        assert process_gone(f"{socket.gethostname()}:{reader.pid}", datetime.now(UTC), timeout=60)
    finally:
        reader.kill()
        reader.wait()


@pytest.mark.short_processes
def test_a_source_process_reads_and_moves_subscriptions_without_importing_pandas(subs: SubscriptionTable) -> None:
    """Spark starts a ``flowqueue`` query's source in a fresh Python process; pandas (which pyarrow
    imports to make zoned datetimes or to build arrays from Python values) would cost it 0.2-0.4 s
    before its first batch. The table is declared beforehand, as a queue's is; times read back
    exact, in UTC."""
    script = f"""
import sys
from datetime import timedelta
from spark_flow.records.subscriptions import SubscriptionTable
subs = SubscriptionTable({subs.location!r}, "q")
subs.create("default", 0)
subs.claim("default", "query-a", timeout=60)
subs.acknowledge("default", 3, reader="query-a")
made = subs.transition(subs.get("default"), True, 1, "{{}}")
sub = subs.get("default")
assert (sub.position, sub.flow_stopped, sub.reader) == (3, True, "query-a"), sub
assert sub.last_transition == made.last_transition and sub.last_transition.utcoffset() == timedelta(0), sub
assert "pandas" not in sys.modules, "pandas imported"
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
