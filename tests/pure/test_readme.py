"""The README's commands as its tests read them: the Quickstart's two are the Makefile's targets
that run the demo and the suite, and the walkthrough's blocks are the ones
tests/processes/test_readme.py runs."""

from __future__ import annotations

from support.docs import ROOT, bash_blocks


def test_the_quickstart_is_the_makefile_targets_of_the_demo_and_of_ci() -> None:
    """``make demo`` runs the demo job and ``make test`` the suite, as CI runs it (the suite is
    what CI's ``make test`` runs; the demo itself is run by no test)."""
    assert bash_blocks("README.md", "Quickstart") == [[["make", "demo"], ["make", "test"]]]
    makefile = (ROOT / "Makefile").read_text()
    assert "\t$(VENV)/bin/python jobs/demo.py" in makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "\t$(VENV)/bin/pytest -n 2" in makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert (ROOT / ".ci" / "run").read_text().splitlines()[-1] == "make test"


def test_readme_walkthrough_blocks_are_the_ones_this_test_runs() -> None:
    setup, controller, producer, consumer, operate = bash_blocks("README.md", "Walkthrough")
    assert setup == [["source", ".venv/bin/activate"], ["export", "SPARK_CONF_DIR=$PWD/conf"]]
    assert [c[0] for c in (*controller, *producer, *consumer)] == ["spark-submit"] * 3
    assert {c[1] for c in operate[1:]} == {"status", "set", "unset", "stop-producers", "start-producers", "plot",
                                           "delete"}
    assert operate[-1][1] == "delete"  # last: the walkthrough's queue is gone after it
