"""Exceptions raised by spark-flow.

Every error names what was wrong (the key, column, queue or subscription), the value seen and
what is allowed, so a failed job's log says how to fix it.
"""

from __future__ import annotations

import re
from typing import Any


def one_line(error: BaseException) -> str:
    """An error as one plain line: deltalake's chains of causes span several colored lines
    (``↳ ...``), and a page, a log line or a command's error is one."""
    parts = (re.sub(r"\x1b\[[0-9;]*m", "", line).strip(" ↳") for line in str(error).splitlines())
    return ": ".join(part for part in parts if part) or type(error).__name__


class SparkFlowError(Exception):
    """Thrown when spark-flow cannot do what was asked; the base of every spark-flow error."""


class ConfigurationError(SparkFlowError, ValueError):
    """Thrown when a configuration key or value is not valid, before any data moves."""

    def __init__(self, key: str, value: Any, allowed: str, hint: str = "") -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        message = f"{key}={value!r} is not valid: allowed is {allowed}"
        super().__init__(f"{message}. {hint}" if hint else message)


class UnknownKeyError(ConfigurationError):
    """Thrown when a `spark.flow.*` key, `flow.*` property or option is not one spark-flow knows."""

    def __init__(self, key: str, value: Any, closest: str | None) -> None:
        hint = f"Did you mean {closest!r}?" if closest else ""
        super().__init__(key, value, "a known spark-flow key", hint)
        self.closest = closest


class DeadLetterQueueError(ConfigurationError):
    """Thrown where a queue's ``deadLetterQueue`` is named (``declare``, ``set``, a Spark conf)
    when that queue cannot take the queue's dead letters: the queue itself, a queue whose dead
    letters lead back to it, or an existing table without the queue's columns then the
    dead-letter columns. Its consumer would otherwise fail at the first dead letter."""

    def __init__(self, key: str, value: Any, queue: str, allowed: str, reason: str) -> None:
        super().__init__(key, value, allowed, reason)
        self.queue = queue


class QueueNotFoundError(SparkFlowError, LookupError):
    """Thrown when a queue path or name holds no Delta table declared as a queue."""

    def __init__(self, queue: str, reason: str) -> None:
        self.queue = queue
        super().__init__(f"queue {queue!r} not found: {reason}")


class QueueDeleteRefusedError(SparkFlowError):
    """Thrown when a queue is not deleted, before anything is removed: it has messages
    (``if_empty``), a consumer reads it (``if_unused``), as RabbitMQ's ``delete_queue`` guards,
    or it is a catalog table, which only Spark can drop."""

    def __init__(self, queue: str, reason: str, allowed: str) -> None:
        self.queue = queue
        self.reason = reason
        super().__init__(f"queue {queue!r} was not deleted: {reason}; allowed is {allowed}")


class HistoryNotFoundError(SparkFlowError, LookupError):
    """Thrown when a plot or report needs the controller's samples and there are none yet."""


class PositionOutOfRangeError(SparkFlowError, ValueError):
    """Thrown when an acknowledgement names a queue version the queue has not reached: it would
    acknowledge messages that were never delivered (Kafka's ``OffsetOutOfRangeException``)."""

    def __init__(self, queue: str, subscription: str, position: int, latest: int) -> None:
        super().__init__(f"queue {queue!r}, subscription {subscription!r}: cannot acknowledge up to position "
                         f"{position}; allowed is a queue version <= {latest}, the latest of queue {queue!r}")
        self.queue, self.subscription, self.position, self.latest = queue, subscription, position, latest


class SubscriptionNotFoundError(SparkFlowError, LookupError):
    """Thrown when a subscription named in an option or call does not exist on its queue."""

    def __init__(self, queue: str, subscription: str, known: list[str]) -> None:
        self.queue = queue
        self.subscription = subscription
        known_text = ", ".join(repr(k) for k in known) or "none"
        super().__init__(
            f"subscription {subscription!r} does not exist on queue {queue!r}: allowed is one of {known_text}, "
            "or create it (Queue.create_subscription, or the source option startingPosition)"
        )


class SubscriptionInUseError(SparkFlowError):
    """Thrown when a streaming query reads a subscription that another live query reads."""

    def __init__(self, queue: str, subscription: str, reader: str, seen_seconds_ago: float,
                 timeout: float | None) -> None:
        self.queue = queue
        self.subscription = subscription
        self.reader = reader
        super().__init__(
            f"subscription {subscription!r} of queue {queue!r} is being read by another query (reader {reader!r}, "
            f"the \"reader\" of that query's offsets, seen {seen_seconds_ago:.1f}s ago): allowed is one query per "
            "subscription; stop the other query, or read another subscription (each gets every message)"
            + (f". A reader not seen for readerTimeout={timeout:g}s is taken over" if timeout else
               "; this query's reader was not seen for longer than readerTimeout and was taken over")
        )


class SchemaMismatchError(SparkFlowError, ValueError):
    """Thrown when a batch's or declared schema does not match the queue's, before anything is written."""

    def __init__(self, queue: str, expected: str, actual: str, detail: str) -> None:
        self.queue = queue
        self.expected = expected
        self.actual = actual
        super().__init__(f"schema does not match queue {queue!r}: {detail}; queue has <{expected}>, got <{actual}>")


class FlowControlError(SparkFlowError):
    """Thrown when flow control refuses a producer's batch (``onFull`` reject and reject-after)."""

    def __init__(self, queue: str, depth: Any, thresholds: Any, detail: str) -> None:
        self.queue = queue
        self.depth = depth
        self.thresholds = thresholds
        self.detail = detail
        super().__init__(
            f"queue {queue!r} refused the batch: {detail} (depth {depth.count} messages / {depth.size} bytes; "
            f"limits: stop {thresholds.stop_count} messages / {thresholds.stop_size} bytes, "
            f"resume {thresholds.resume_count} messages / {thresholds.resume_size} bytes{_ages(thresholds)})"
        )


def _ages(thresholds: Any) -> str:
    """The age thresholds, where the queue has them (``Thresholds.stop_age``)."""
    if not getattr(thresholds, "stop_age", 0):
        return ""
    return f"; stop age {thresholds.stop_age:g}s, resume age {thresholds.resume_age:g}s"


class QueueFullError(FlowControlError):
    """Thrown at once when a producer with ``onFull=reject`` writes to a flow-stopped queue
    (ActiveMQ's ``sendFailIfNoSpace``), or to a ``ring-strict`` queue that cannot make room."""


class QueueFullTimeoutError(FlowControlError):
    """Thrown when a producer with ``onFull=reject-after`` was held longer than ``rejectTimeout``
    (ActiveMQ's ``sendFailIfNoSpaceAfterTimeout``)."""


class HoldInterruptedError(SparkFlowError):
    """Thrown when a query is stopped before its batch's last write: while held or throttled,
    or between the batch's chunks; the batch is not complete, so it is replayed (and its
    enqueued chunks skipped) when the query restarts."""


class QueueSettingError(ConfigurationError):
    """Thrown when a queue setting is given where only a producer's or consumer's settings go
    (a query's options): a queue has one value for every process, recorded with the queue."""

    def __init__(self, key: str, value: Any) -> None:
        super().__init__(key, value, "a producer setting here: capacity, onFull, rejectTimeout, pollInterval, "
                                     "msgPublishRate, bytePublishRate",
                         f"{key} is a queue setting, one value for every process of the queue: give it where the "
                         f"queue is declared (declare(..., settings={{'{key}': ...}}), a flow.{key} table property, "
                         f"spark.flow.{key} in the conf of the job that declares or first writes the queue) or "
                         f"change it at run time with `spark-flow set <queue> {key}=...`")


class ProducerSettingError(ConfigurationError):
    """Thrown when a producer's setting is given where only queue settings go (``declare``,
    table properties, ``set``) or to a consumer: it says how one producer waits, so it belongs
    to that producer."""

    def __init__(self, key: str, value: Any, name: str, allowed: str) -> None:
        super().__init__(key, value, allowed, f"{name} is a producer setting: give it to the producer (QueueSink "
                                              f"options, or spark.flow.{name} in its Spark conf)")


class QueueWriterConflictError(SparkFlowError):
    """Thrown when a second Spark application would write a queue whose storage's Delta commits
    are safe for one application only (S3 without a multi-cluster LogStore), before it writes."""

    def __init__(self, queue: str, path: str, application: str, process: str | None, seen_seconds_ago: float,
                 log_store_key: str, timeout: float) -> None:
        self.queue, self.path, self.application = queue, path, application
        super().__init__(
            f"queue {queue!r} at {path} is written by another Spark application ({application!r}, process "
            f"{process}, seen {seen_seconds_ago:.0f}s ago): Delta's default LogStore on this storage commits safely "
            f"for one application only, and two would overwrite each other's commits. Allowed is one producer "
            f"application per queue here (the claim lapses when that application's process ends, or after "
            f"{timeout:.0f}s unseen), or set {log_store_key}=io.delta.storage.S3DynamoDBLogStore (with "
            f"spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName) in every application writing it")


class DeadLetterLimitError(SparkFlowError):
    """Thrown when more messages of one batch fail alone than ``maxDeadLettersPerBatch``: the
    consumer is failing, not its messages, and nothing more is moved to the dead-letter queue."""

    def __init__(self, queue: str, subscription: str, moved: int, limit: int, error: str) -> None:
        self.queue = queue
        self.subscription = subscription
        self.moved = moved
        self.limit = limit
        super().__init__(
            f"subscription {subscription!r} of queue {queue!r}: {moved} messages of one batch failed alone, "
            f"allowed is maxDeadLettersPerBatch={limit}; the batch fails instead (the consumer, not its "
            f"messages, is failing: fix it, then restart the query, which goes on where it stopped). "
            f"Last error: {error}"
        )


class StorageAccessError(SparkFlowError, OSError):
    """Thrown when this Python process's ``deltalake`` cannot reach a location or is refused
    there, before spark-flow writes anything: names the location, what is missing and where to
    give it (Spark's own credentials may stay in its JVM, out of Python's reach). An ``OSError``,
    as the storage failure it names."""

    def __init__(self, location: str, missing: str, fix: str) -> None:
        self.location = location
        self.missing = missing
        self.fix = fix
        super().__init__(f"cannot use {location} from this Python process: {missing}; {fix}")


class EngineUnreachableError(SparkFlowError, ConnectionError):
    """Thrown when the Spark Connect server an entry point was given (``--remote``,
    ``SPARK_REMOTE``, ``spark.remote``) does not answer: names where the URL came from, the URL
    (its token hidden) and what was seen. A ``ConnectionError``: the engine, not a setting, failed."""

    def __init__(self, key: str, url: str, seen: str) -> None:
        self.key = key
        self.url = url
        super().__init__(f"{key}={url!r}: no Spark Connect server answered there ({seen}); allowed is the "
                         "sc://host:port of a running Spark Connect server (port 15002 by default)")
