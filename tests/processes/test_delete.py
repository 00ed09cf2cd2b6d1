"""Deleting a queue (``spark-flow delete``, ``FlowAdmin.delete_queue``), and what every process of a
queue does once it is gone, however it went: the command, ``DROP TABLE`` of a catalog queue, its
directory removed. The Qpid C++ broker's ``test_blocked_queue_delete``: a producer held by a queue
that is then deleted ends (there within 5 s; here within one ``pollInterval``, short in these
tests, checked as the producer failing long before a generous deadline) with
``QueueNotFoundError`` naming the queue, and nothing is written in the queue's place again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from deltalake.fs import DeltaStorageHandler
from support.homes import queue_with_state
from support.stores import Store

from spark_flow.exceptions import QueueNotFoundError
from spark_flow.ops.admin import FlowAdmin
from spark_flow.store.access import file_system


def holds_anything(location: str, options: Mapping[str, str]) -> bool:
    """Whether anything is at ``location``: a file, or a directory (holding files or not)."""
    from pyarrow.fs import FileType

    files, path = file_system(location, options)
    return bool(files.get_file_info(path).type != FileType.NotFound)


@pytest.mark.processes
@pytest.mark.parametrize("store", ["local", "s3", "abfs", "gcs"], indirect=True)
def test_the_command_removes_table_state_and_registration(store: Store, tmp_path: Path) -> None:
    """``spark-flow delete`` (no Spark) on local storage, S3, Azure Blob and GCS: an unknown queue
    names the registered ones, ``--if-empty`` refuses and removes nothing; then the table, the
    state location and the registration are gone, and a handle opened before can neither look
    at the queue nor write its state (nothing is made again at its state location)."""
    queue = queue_with_state(store, "events")
    if store.kind == "abfs":  # the empty blob Hadoop's ABFS marks a directory with, as Spark leaves it
        DeltaStorageHandler(store.root, store.options).open_output_stream("queues/events").close()
    properties = tmp_path / "storage.conf"
    properties.write_text("".join(f"{key} {value}\n" for key, value in store.conf.items()))

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).parent / "spark-flow"), "--home", store.url("home"),
                               "--properties-file", str(properties), *argv], capture_output=True, text=True,
                              timeout=120, check=False)

    unknown = cli("delete", "payments")
    assert unknown.returncode == 2
    assert "queue 'payments' not found: not registered in " in unknown.stderr and "one of 'events'" in unknown.stderr
    refused = cli("delete", "events", "--if-empty")
    assert refused.returncode == 2 and "it has messages not acknowledged (subscription 'default': 3)" in refused.stderr
    assert holds_anything(queue.path, store.options) and holds_anything(queue.state_location, store.options)

    deleted = cli("delete", "events", "--if-unused")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.startswith(f"queue 'events' deleted: its table at {queue.path}, its state at ")
    assert not holds_anything(queue.path, store.options) and not holds_anything(queue.state_location, store.options)
    assert FlowAdmin(store.url("home"), store.options).queues() == {}
    with pytest.raises(QueueNotFoundError, match=r"queue 'events' not found: its table at .* is gone"):
        queue.refresh()
    with pytest.raises(QueueNotFoundError, match="queue 'events' not found"):
        queue.hold_times.record("query", 1, 2.0)  # what a held producer stopped after the deletion would write
    assert not holds_anything(queue.state_location, store.options)
    for secret in store.secrets:
        assert secret not in deleted.stdout + deleted.stderr + refused.stderr
