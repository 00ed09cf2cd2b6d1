"""The quick tier keeps itself quick: a test in it that starts a process fails (support.tiers'
audit hook), however the process is started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_a_quick_tier_test_that_starts_a_process_fails() -> None:
    with pytest.raises(AssertionError, match=r"test_tiers.py::test_a_quick_tier_test_that_starts_a_process_fails(@\w+)? "
                                             r"started a process \(subprocess.Popen .*'-c'.* but is not marked processes"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(AssertionError, match=r"started a process \(os.system "):
        os.system("true")
