"""``declare`` checks the dead-letter queue it is given (its settings or the session's conf)
before it creates or changes anything: not the queue itself, no cycle, and an existing table
with the queue's columns then the dead-letter columns (``FlowAdmin.set``'s and a process conf's
checks are in tests/pure/test_dead_letter_queue.py). The queue a conf names for every queue is
declared by ``DeadLetters`` without a dead-letter queue of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_flow.exceptions import DeadLetterQueueError
from spark_flow.flow.dead_letter_queue import dead_letter_schema
from spark_flow.flow.queue import Queue
from spark_flow.spark.dead_letters import DeadLetters
from spark_flow.spark.declare import declare
from spark_flow.spark.session import with_conf

SCHEMA = "id BIGINT, body STRING"


def test_declare_refuses_the_queue_itself_or_a_cycle_and_writes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    events, other = str(tmp_path / "events"), str(tmp_path / "other")
    with pytest.raises(DeadLetterQueueError, match=rf"^flow\.deadLetterQueue='{re.escape(events)}' is not valid: "
                                                   r"allowed is a queue other than 'events' itself\. Its dead "
                                                   r"letters carry the dead-letter columns \(_origin_queue, "):
        declare(spark, events, SCHEMA, settings={"maxDeliveries": 2, "deadLetterQueue": events})
    assert not DeltaTable.is_deltatable(events), "nothing created"
    declare(spark, events, SCHEMA, settings={"deadLetterQueue": other})
    declare(spark, other, dead_letter_schema(Queue(events).spark_schema()))
    with pytest.raises(DeadLetterQueueError, match=rf"^flow\.deadLetterQueue='{re.escape(events)}' is not valid: "
                                                   r"allowed is a queue whose dead letters do not lead back to "
                                                   r"'other'\. Dead letters would go round: other -> events -> other$"):
        declare(spark, other, settings={"deadLetterQueue": events, "stopCount": 9})
    assert "flow.stopCount" not in Queue(other).properties(), "nothing changed"


def test_declare_checks_the_columns_of_the_dead_letter_queue_its_conf_names(spark: SparkSession,
                                                                             tmp_path: Path) -> None:
    """An existing queue without the dead-letter columns is refused, naming the conf's key; the
    queue a conf names for every queue takes the dead letters and has no dead-letter queue of
    its own when ``DeadLetters`` declares it."""
    events, plain, shared = str(tmp_path / "events"), str(tmp_path / "plain"), str(tmp_path / "shared")
    declare(spark, plain, SCHEMA)
    key = "spark.flow.queues.events.deadLetterQueue"
    with with_conf(spark, {key: plain}), pytest.raises(DeadLetterQueueError, match=(
            rf"^{re.escape(key)}='{re.escape(plain)}' is not valid: allowed is a new queue, or one with the columns "
            r"of 'events' then the dead-letter columns: <struct<id:bigint,body:string,_origin_queue:string,.*>>\. "
            r"The table there has <struct<id:bigint,body:string>>$")):
        declare(spark, events, SCHEMA)
    assert not DeltaTable.is_deltatable(events)
    with with_conf(spark, {"spark.flow.deadLetterQueue": shared}):
        queue = declare(spark, events, SCHEMA, settings={"maxDeliveries": 2})
        settings = queue.settings()
        assert settings.dead_letter_queue == shared
        dead_letters = DeadLetters(lambda batch, batch_id: None, events).dead_letter_queue(spark, queue, settings)
    assert dead_letters.path == shared and dead_letters.settings().dead_letter_queue is None
