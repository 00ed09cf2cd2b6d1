"""Several producer applications on one queue on S3, where Delta's commits are safe for one
application only: the second live application is refused before it writes, so no commit is
overwritten and no message lost silently (on the suite's S3 server)."""

from __future__ import annotations

from spark_flow.records.writer_claim import needs_claim


def test_which_queues_need_a_claim() -> None:
    assert needs_claim("s3a://b/q", {}) and needs_claim("s3://b/q", {})
    assert needs_claim("s3a://b/q", {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"})
    assert not needs_claim("s3a://b/q", {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore"})
    assert not needs_claim("s3://b/q", {"spark.delta.logStore.class": "io.delta.storage.S3DynamoDBLogStore"})
    for safe in ("/data/q", "file:/data/q", "abfss://c@a.dfs.core.windows.net/q", "gs://b/q"):
        assert not needs_claim(safe, {}), safe
