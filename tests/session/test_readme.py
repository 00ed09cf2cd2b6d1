"""The README's Python example, run as written in the suite's session, with the flow
controller's example of docs/operations.md that goes on from it."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from support.docs import python_blocks


def test_readme_python_examples_as_written(spark: SparkSession, tmp_path: Path) -> None:
    """The README's Python example, then the flow controller's of docs/operations.md that goes on
    from it, in one namespace, with their paths under a temporary folder: the queue fills, the controller registers it and writes its status, the
    run-time commands are accepted, the plot is drawn; then the example's last lines stop the
    queries and delete the queue: its table, state and registration are gone."""
    blocks = [block.replace("/data/", f"{tmp_path}/data/").replace("/chk/", f"{tmp_path}/chk/")
              .replace("/tmp/events.png", f"{tmp_path}/events.png")
              for block in (*python_blocks("README.md", "How it works"),
                            *python_blocks("docs/operations.md", "The flow controller, status and operator commands"))]
    assert len(blocks) == 2
    namespace: dict[str, object] = {}
    try:
        before, delete = blocks[1].split("for query in (producer, consumer):")
        for block, page in ((blocks[0], "README.md"), (before, "docs/operations.md")):
            exec(compile(block, page, "exec"), namespace)
        admin = namespace["admin"]
        status = admin.status()  # type: ignore[attr-defined]
        assert list(status["queue"]) == ["events", "events"]  # default and audit
        assert (tmp_path / "events.png").read_bytes()[:4] == b"\x89PNG"
        assert [c.command for c in admin.commands.read()] == [  # type: ignore[attr-defined]
            "set", "unset", "stop-producers", "start-producers"]
        queue = namespace["queue"]
        queue.refresh()  # type: ignore[attr-defined]
        assert queue.settings().thresholds.resume_count == 600  # type: ignore[attr-defined]

        exec(compile("for query in (producer, consumer):" + delete, "docs/operations.md", "exec"), namespace)
        assert admin.queues() == {} and not (tmp_path / "data" / "queues" / "events").exists()  # type: ignore[attr-defined]
        assert list(admin.status()["queue"]) == []  # type: ignore[attr-defined]
    finally:
        for query in spark.streams.active:
            query.stop()
        if "listener" in namespace:
            spark.streams.removeListener(namespace["listener"])  # type: ignore[arg-type]
        spark.conf.unset("spark.flow.home")
