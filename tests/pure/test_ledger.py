"""The ledger: what each commit of a queue table enqueued, read incrementally from its Delta log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from spark_flow.rules.depth import METADATA_KEY, Commit, Depth, Position, commit_from_info
from spark_flow.store.ledger import Ledger
from spark_flow.store.table import open_table

TIMESTAMP = 1795336486014


def spark_info(version: int, read_version: int, operation: str, metrics: dict[str, str],
               parameters: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A commit info of delta-spark 4.4 / Spark 4.2 (it writes metrics as strings)."""
    return {"engineInfo": "Apache-Spark/4.2.0 Delta-Lake/4.4.0", "operation": operation, "operationMetrics": metrics,
            "operationParameters": parameters, "readVersion": read_version, "timestamp": TIMESTAMP,
            "version": version, **more}


def rs_info(version: int, operation: str, parameters: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A commit info of delta-rs 1.6."""
    return {"clientVersion": "delta-rs.py-1.6.6", "operation": operation, "operationParameters": parameters,
            "timestamp": TIMESTAMP, "version": version, **more}


# Commit infos as deltalake's DeltaTable.history() returns them, copied from real logs.
SPARK_WRITE = spark_info(1, 0, "WRITE", {"numFiles": "2", "numOutputBytes": "1407", "numOutputRows": "2"},
                         {"mode": "Append", "partitionBy": "[]"}, isBlindAppend=True,
                         isolationLevel="Serializable", txnId="30b1e891-280a-426d-8332-f8a7a38859c4")
SPARK_STREAMING_UPDATE = spark_info(
    2, 1, "STREAMING UPDATE",
    {"numAddedFiles": "2", "numOutputBytes": "1517", "numOutputRows": "25", "numRemovedFiles": "0"},
    {"epochId": "3", "outputMode": "Append", "queryId": "a17d349e-2284-4944-9cc0-27f9ddbbb21f"},
    isBlindAppend=True, isolationLevel="Serializable")
RS_WRITE = rs_info(3, "WRITE", {"mode": "Append"}, engineInfo="delta-rs:py-1.6.6", operationMetrics={
    "execution_time_ms": 2, "num_added_files": 1, "num_added_rows": 7, "num_partitions": 0, "num_removed_files": 0,
    "num_retries": 0})
SPARK_DELETE = spark_info(
    4, 2, "DELETE",
    {"numAddedBytes": "0", "numAddedFiles": "0", "numCopiedRows": "0", "numDeletedRows": "2",
     "numRemovedBytes": "1400", "numRemovedFiles": "2"},
    {"predicate": '["(id#569L = 1)"]'})
SPARK_OPTIMIZE = spark_info(
    5, 3, "OPTIMIZE", {"numAddedBytes": "773", "numAddedFiles": "1", "numRemovedBytes": "1414", "numRemovedFiles": "2"},
    {"auto": False, "clusterBy": "[]", "predicate": "[]", "zOrderBy": "[]"})
SPARK_SET_PROPERTIES = spark_info(6, 4, "SET TBLPROPERTIES", {}, {"properties": '{"flow.stopCount":"5"}'})
RS_DELETE = rs_info(7, "DELETE", {"predicate": "id = 1"}, readVersion=1, operationMetrics={
    "num_added_files": 1, "num_copied_rows": 2, "num_deleted_rows": 2, "num_removed_files": 2})
RS_SET_PROPERTIES = rs_info(8, "SET TBLPROPERTIES", {"properties": '{"delta.appendOnly":"false"}'})


def sink_metadata(count: int, size: int, **extra: Any) -> str:
    """``userMetadata`` as the sink writes it."""
    return json.dumps({METADATA_KEY: {"count": count, "size": size, **extra}})


def test_sink_metadata_is_exact_and_wins_over_operation_metrics() -> None:
    """The sink's own count and content size win over the Parquet bytes Delta reports; the
    query, batch and seconds held and throttled come with them (what a query listener reports)."""
    info = {**SPARK_WRITE, "userMetadata": sink_metadata(2, 19, producer="spark-flow/q1", batch=3, query="q1",
                                                          held=1.5, throttled=0.25)}
    assert commit_from_info(info) == Commit(1, TIMESTAMP, 2, 19, query="q1", producer="spark-flow/q1", batch=3, held=1.5,
                                            throttled=0.25)


def test_sink_metadata_already_parsed() -> None:
    """A ``userMetadata`` given as a mapping (not JSON text) is read the same way."""
    info = {**SPARK_WRITE, "userMetadata": {METADATA_KEY: {"count": 5, "size": 40}}}
    assert commit_from_info(info) == Commit(1, TIMESTAMP, 5, 40)


@pytest.mark.parametrize(
    ("info", "count", "size"),
    [
        pytest.param(SPARK_WRITE, 2, 1407, id="delta-spark WRITE"),
        pytest.param(SPARK_STREAMING_UPDATE, 25, 1517, id="delta-spark STREAMING UPDATE"),
        pytest.param(RS_WRITE, 7, 0, id="delta-rs WRITE reports no bytes"),
        pytest.param({**SPARK_WRITE, "operation": "MERGE",
                      "operationMetrics": {"numTargetRowsInserted": "4", "numTargetRowsUpdated": "0"}},
                     4, 0, id="delta-spark MERGE inserts"),
        pytest.param({**RS_WRITE, "operation": "MERGE",
                      "operationMetrics": {"num_target_rows_inserted": 3, "num_target_rows_updated": 1}},
                     3, 0, id="delta-rs MERGE inserts"),
    ],
)
def test_plain_writers_count_their_output_rows(info: dict[str, Any], count: int, size: int) -> None:
    """Writers that do not use spark-flow count in the depth by their operation metrics."""
    commit = commit_from_info(info)
    assert (commit.version, commit.timestamp, commit.count, commit.size) == (info["version"], TIMESTAMP, count, size)


@pytest.mark.parametrize(
    "info",
    [
        pytest.param(SPARK_DELETE, id="delta-spark DELETE"),
        pytest.param(SPARK_OPTIMIZE, id="delta-spark OPTIMIZE"),
        pytest.param(SPARK_SET_PROPERTIES, id="delta-spark SET TBLPROPERTIES"),
        pytest.param(RS_DELETE, id="delta-rs DELETE"),
        pytest.param(RS_SET_PROPERTIES, id="delta-rs SET TBLPROPERTIES without metrics"),
        pytest.param({"version": 0, "timestamp": TIMESTAMP, "operation": "CREATE TABLE", "operationMetrics": {}},
                     id="CREATE TABLE"),
    ],
)
def test_commits_that_add_no_messages_count_zero(info: dict[str, Any]) -> None:
    """DELETE, OPTIMIZE and property changes enqueue nothing."""
    assert commit_from_info(info) == Commit(info["version"], TIMESTAMP, 0, 0)


@pytest.mark.parametrize(
    "user_metadata",
    [
        pytest.param("nightly backfill, run 5", id="not JSON"),
        pytest.param("[1, 2]", id="JSON list"),
        pytest.param("null", id="JSON null"),
        pytest.param(json.dumps({"owner": "etl"}), id="another tool's metadata"),
        pytest.param(json.dumps({METADATA_KEY: 5}), id="entry not an object"),
        pytest.param(json.dumps({METADATA_KEY: {"count": 9}}), id="size missing"),
        pytest.param(json.dumps({METADATA_KEY: {"count": "many", "size": 1}}), id="count not a number"),
        pytest.param(json.dumps({METADATA_KEY: {"count": None, "size": 1}}), id="count null"),
        pytest.param(json.dumps({METADATA_KEY: {"count": -3, "size": 1}}), id="count negative"),
        pytest.param("", id="empty"),
    ],
)
def test_malformed_user_metadata_is_ignored(user_metadata: str) -> None:
    """A commit whose ``userMetadata`` is not the sink's falls back to its operation metrics."""
    assert commit_from_info({**SPARK_WRITE, "userMetadata": user_metadata}) == Commit(1, TIMESTAMP, 2, 1407)


def test_missing_timestamp_and_operation() -> None:
    """A bare commit info (no timestamp, no operation) is a commit of nothing at time 0."""
    assert commit_from_info({"version": 12}) == Commit(12, 0, 0, 0)


def test_depth_adds_counts_and_sizes() -> None:
    assert Depth(2, 10) + Depth(3, 5) == Depth(5, 15)
    assert Depth() == Depth(0, 0)


def append(path: Path, rows: int = 1, **kwargs: Any) -> None:
    """One append commit of ``rows`` small messages, written by delta-rs."""
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "body": pa.array(["m"] * rows)})
    write_deltalake(str(path), table, mode="append", **kwargs)


def test_ledger_reads_sink_and_plain_commits_from_a_real_log(tmp_path: Path) -> None:
    """Sink commits (userMetadata) and plain appends, as deltalake reads a real table's log."""
    path = tmp_path / "q"
    append(path, 2)  # version 0: plain delta-rs write, 2 rows, no bytes reported
    append(path, 3, commit_properties=CommitProperties(custom_metadata={"userMetadata": sink_metadata(3, 27)}))
    append(path, 4)
    ledger = Ledger(open_table(str(path)))
    assert [(c.version, c.count, c.size) for c in ledger.commits(after=-1)] == [(0, 2, 0), (1, 3, 27), (2, 4, 0)]
    assert ledger.depth(after=-1) == Depth(9, 27)
    assert ledger.depth(after=0) == Depth(7, 27)
    assert ledger.depth(after=0, upto=1) == Depth(3, 27)
    assert ledger.depth(after=2) == Depth()
    assert ledger.depth(after=Position(0, 1)) == Depth(6, 18), "inside version 1: 2 of its 3 messages wait"
    assert ledger.depth(after=Position(0, 3)) == ledger.depth(after=1)


def test_a_commit_is_shared_out_by_message() -> None:
    """A commit's size is known only as a total: a part of it is charged its share, so its parts
    add up to the whole, whatever the cut."""
    commit = Commit(5, 1000, 7, 100)
    assert [commit.size_of(i) for i in range(8)] == [0, 14, 28, 42, 57, 71, 85, 100]
    assert commit.part(0, 3) + commit.part(3, 7) == Depth(7, 100)
    assert commit.part(2, 2) == Depth(0, 0) and commit.part(2, 2).oldest is None
    assert Commit(6, 0, 0, 0).size_of(0) == 0
    assert Position(3, 2) > Position(3, 1) > Position(3) > Position(2, 999)
    assert (Position(3, 2).reached, Position(3).reached, Position.of(4)) == (4, 3, Position(4, 0))


def test_ledger_sees_new_commits_only_after_refresh(tmp_path: Path) -> None:
    path = tmp_path / "q"
    append(path)
    ledger = Ledger(open_table(str(path)))
    append(path)
    assert ledger.depth(after=-1) == Depth(1, 0)
    assert ledger.refresh() == 1
    assert ledger.depth(after=-1) == Depth(2, 0)


def test_forget_drops_acknowledged_commits_and_rereads_them_if_asked(tmp_path: Path) -> None:
    """Forgetting keeps memory flat; a later question about old commits still has the right answer."""
    path = tmp_path / "q"
    for _ in range(4):
        append(path)
    ledger = Ledger(open_table(str(path)))
    assert ledger.depth(after=-1) == Depth(4, 0)
    assert ledger.reads == 4
    ledger.forget(upto=2)
    assert ledger.depth(after=2) == Depth(1, 0)
    assert ledger.reads == 4, "commits after the forgotten ones are still known"
    assert ledger.depth(after=0) == Depth(3, 0)
    assert 4 + 2 <= ledger.reads <= 4 + 3, "forgotten commits 1 and 2 are read from the log again"


def test_depth_after_1000_consumed_messages_reads_only_the_commits_since(tmp_path: Path) -> None:
    """The depth after 1,000 consumed messages (200 commits) reads only the commits since
    (docs/design.md 2.4, 3.6); bench/scaling.py shows the time flat from 10^3 to 10^6."""
    path = tmp_path / "q"
    # Versions 0..199, all consumed. Frequent checkpoints only make the writes faster.
    append(path, 5, configuration={"delta.checkpointInterval": "20"})
    for _ in range(199):
        append(path, 5)
    ledger = Ledger(open_table(str(path)))
    assert ledger.reads == 0

    for _ in range(3):
        append(path)
    assert ledger.refresh() == 202
    assert ledger.depth(after=199) == Depth(3, 0)
    assert ledger.reads == 3, "only the 3 new commits are read, not the 200 consumed ones"

    for _ in range(2):
        append(path)
    assert ledger.refresh() == 204
    assert ledger.depth(after=199) == Depth(5, 0)
    assert ledger.reads == 5, "a second look reads only the 2 commits since the first"
    assert ledger.depth(after=199) == Depth(5, 0)
    assert ledger.reads == 5, "asking again without new commits reads nothing"


def test_a_commit_landing_while_a_handle_is_stale_keeps_its_own_number(tmp_path: Path) -> None:
    """deltalake 1.6.6's ``history(n)`` reads the newest commits in storage but numbers them from
    the handle's loaded version: a commit landing after the handle's last refresh would be read
    as the version before it, and its messages counted twice (seen as a controller's depth of
    60 for a queue of 30). The ledger reads again until its handle is the newest."""
    path = str(tmp_path / "q")
    for rows in (1, 2, 3):
        write_deltalake(path, pa.table({"id": list(range(rows))}), mode="append")
    ledger = Ledger(open_table(path))
    latest = ledger.refresh()
    write_deltalake(path, pa.table({"id": list(range(7))}), mode="append")  # another process, meanwhile
    assert [(c.version, c.count) for c in ledger.commits(-1, latest)] == [(0, 1), (1, 2), (2, 3)]
    assert ledger.depth(-1, ledger.refresh()).count == 1 + 2 + 3 + 7
