"""Dead letters: a consumer's foreachBatch function that finds the messages it fails on and moves
them to the queue's dead-letter queue, so one poison message cannot stop a pipeline.

Flow control carries a consumer's trouble upstream: a message that makes the consumer's
foreachBatch raise fails the query at every restart, nothing is acknowledged, its queue fills
and its producers are held for good. With the queue's ``maxDeliveries`` set, :class:`DeadLetters`
runs the consumer's function on the batch and, when it raises, delivers the batch again in
parts: a failing part is halved, a part that succeeds is done, in the batch's order, until a
message fails alone. A message that fails alone ``maxDeliveries`` times is moved to the
dead-letter queue (:mod:`spark_flow.flow.dead_letter_queue`) with the error, its deliveries and its
origin, counted in the subscription's ``dead_lettered_count``, and the batch goes on: a batch
of 10,000 messages with one poison message moves that one, in about 2 x log2(10,000) calls.

Exactly once: every call of the consumer's function gets a batch id of its own, increasing, for
Delta's idempotent writes (``txnVersion``) and a :class:`~spark_flow.spark.sink.QueueSink` inside it:
Spark's batch id, moved on by the calls earlier redeliveries made (so Spark's own until a batch
first fails; the count is kept in the subscription's row). The redelivery's progress (the
messages done, the part in flight and its call) is recorded in the subscription's row before
each call, so a process killed in the middle goes on after its restart where it stopped: the
part in flight is delivered again with the same id (its writes, if they committed, are
skipped), the parts done are not delivered again. Errors of spark-flow's own (a full queue, a
queue deleted) are not a message's fault: they fail the batch as they would without this. What is not covered: a function whose
writes commit before it raises (fail before writing, or write in one commit, as Spark's own
retries of a batch need too); failures outside the function (the source, Spark itself).

More dead letters in one batch than ``maxDeadLettersPerBatch`` fail the batch instead
(:class:`~spark_flow.exceptions.DeadLetterLimitError`): a consumer that fails for every message
(its sink is down) is broken, not its messages, and nothing more is moved.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from spark_flow.exceptions import DeadLetterLimitError, SparkFlowError
from spark_flow.flow.dead_letter_queue import (
    append_once,
    dead_letter_app_id,
    dead_letter_queue,
    dead_letter_rows,
    dead_letter_schema,
)
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.records.subscriptions import DEFAULT_SUBSCRIPTION
from spark_flow.spark.batch import TXN_SPAN, message_size, order_key, unpersist
from spark_flow.spark.declare import declare, queue_location
from spark_flow.spark.delivery import Delivery
from spark_flow.spark.session import is_connect, session_storage_options, still_active, streaming_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_flow.rules.settings import QueueSettings

#: A dead-letter queue's own settings, recorded at its declaration over whatever the session's
#: ``spark.flow.*`` conf says: no flow control, and nothing of it ever discarded or expired.
_DEAD_LETTER_QUEUE_SETTINGS = {"producerFlowControl": "false", "policy": "flow", "maxCount": "0", "maxSize": "0",
                               "messageTtl": "0", "maxDeliveries": "0"}

log = logging.getLogger("spark_flow.spark.dead_letters")

#: The log4j context key (and value) of Spark's log entries of a call whose failure dead letters
#: handle: conf/log4j2.properties drops them (the failure is spark-flow's one WARNING line).
QUIET_KEY, QUIET_VALUE = "mdc.spark_flow.delivery", "dead-letters"

_ROW = "__spark_flow_row"
_IN_COMMIT = "__spark_flow_index"
_MESSAGE_COLUMNS = ("_position", "_enqueue_time")
#: A line naming an exception: ``Caused by: org.apache.spark.SparkNumberFormatException: ...``,
#: ``ValueError: ...``, ``: org.apache.spark.SparkException: ...``.
_CAUSE = re.compile(r"^(?:Caused by: |: )?([\w.$]*(?:Error|Exception)):(?: (.*))?$")


class DeadLetters:
    """A consumer's foreachBatch function with dead letters, for batches of the ``flowqueue``
    source reading ``subscription`` of ``queue`` (a path or a catalog name).

    ``process(batch, batch_id)`` is the consumer's own function. Its ``batch_id`` is unique and
    increasing for each call (use it as Delta's ``txnVersion``); a batch it fails on is delivered
    again in parts. With the queue's ``maxDeliveries`` at 0 (the default) its failures are the
    query's, as without this function.

    Examples
    --------
    >>> query = (read_queue(spark, "events", subscription="enrich").writeStream
    ...          .foreachBatch(DeadLetters(enrich, "events", "enrich"))
    ...          .option("checkpointLocation", "/chk/enrich").start())
    """

    def __init__(self, process: Callable[[DataFrame, int], None], queue: str,
                 subscription: str = DEFAULT_SUBSCRIPTION, *, query_name: str | None = None) -> None:
        self.process = process
        self.queue = queue
        self.subscription = subscription
        self.query_name = query_name
        self._dead_letter_queues: dict[str, Queue] = {}  # declared, by location

    def dead_letter_queue(self, spark: SparkSession, queue: Queue, settings: QueueSettings) -> Queue:
        """The queue's dead-letter queue, declared at its first dead letter (registered in the
        session's home, if any), with no flow control: dead letters never hold a consumer."""
        location = dead_letter_queue(queue, settings)
        if location not in self._dead_letter_queues:
            self._dead_letter_queues[location] = declare(spark, location, dead_letter_schema(queue.spark_schema()),
                                                         settings=_DEAD_LETTER_QUEUE_SETTINGS)
        return self._dead_letter_queues[location]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        queue = open_queue(queue_location(spark, self.queue), session_storage_options(spark))
        queue.refresh()
        settings = queue.settings()
        subscription = queue.subscriptions.get(self.subscription)
        text, begun = subscription.delivery, subscription.acknowledged
        recorded = Delivery.parse(text)
        active = still_active(streaming_query(spark, self.query_name, required=False))
        if recorded.batch == batch_id:  # a restart in the middle of it
            _Redelivery(self, spark, queue, settings, batch, text, active).resume(recorded)
            return
        if recorded.batch >= 0:  # an earlier batch's, done
            text = _record(queue, self.subscription, text, recorded.finished())
            recorded = recorded.finished()
        try:
            with quiet_failures(spark, bool(settings.max_deliveries)):
                self.process(batch, recorded.batch_id(batch_id))
        except SparkFlowError:
            raise  # flow control's (a full queue, a queue gone): the batch's, not a message's
        except Exception as error:
            if not settings.max_deliveries or not active():
                raise
            redelivery = _Redelivery(self, spark, queue, settings, batch, text, active)
            redelivery.after_whole(replace(recorded, batch=batch_id, start_version=begun.version,
                                           start_index=begun.index), error)


class _Redelivery:
    """One failed batch delivered again in parts: the parts still to deliver (a stack, the
    leftmost last), the delivery as it is and as the subscription's row last recorded it."""

    def __init__(self, owner: DeadLetters, spark: SparkSession, queue: Queue, settings: QueueSettings,
                 batch: DataFrame, recorded: str | None, active: Callable[[], bool]) -> None:
        self.owner, self.spark, self.queue, self.settings, self.active = owner, spark, queue, settings, active
        self.numbered = _numbered(batch).persist()
        self.recorded = recorded  # the subscription row's delivery, as last read or written
        self.parts: list[tuple[int, int]] = []

    def after_whole(self, delivery: Delivery, error: Exception) -> None:
        """The whole batch (call 0) failed: deliver it again in parts."""
        self._run(lambda count: self._failed(delivery, 0, count, error))

    def resume(self, recorded: Delivery) -> None:
        """Go on where the recorded delivery stopped: the part in flight first, with its call."""
        def start(count: int) -> Delivery:
            if recorded.hi <= recorded.lo:
                self.parts.append((recorded.done, count))
                return recorded
            self.parts.append((recorded.hi, count))
            again = replace(recorded, redelivered=recorded.redelivered + recorded.hi - recorded.lo)
            return self._call(again, recorded.lo, recorded.hi)

        self._run(start)

    def _run(self, start: Callable[[int], Delivery]) -> None:
        """Deliver the parts, then record the batch all done, still as this batch's: if Spark runs
        the batch again (its process died before Spark's commit), nothing is delivered again;
        the next batch folds its calls into the later ids (:meth:`Delivery.finished`)."""
        try:
            count = self.numbered.count()
            delivery = start(count)
            while self.parts:
                lo, hi = self.parts.pop()
                if hi > lo:
                    delivery = self._call(self._record(replace(delivery, lo=lo, hi=hi, call=delivery.call + 1,
                                                               redelivered=delivery.redelivered + hi - lo)), lo, hi)
            self._record(replace(delivery, done=count, lo=0, hi=0, attempts=0, taken=count))
        finally:
            unpersist(self.numbered)

    def _call(self, delivery: Delivery, lo: int, hi: int) -> Delivery:
        """Deliver messages ``lo..hi`` (recorded as in flight) to the consumer's function."""
        try:
            with quiet_failures(self.spark):
                self.owner.process(_part(self.numbered, lo, hi), delivery.batch_id(delivery.batch))
        except SparkFlowError:
            raise
        except Exception as error:
            if not self.active():
                raise
            return self._failed(delivery, lo, hi, error)
        return replace(delivery, done=hi, attempts=0)

    def _failed(self, delivery: Delivery, lo: int, hi: int, error: Exception) -> Delivery:
        """A part failed: its halves are delivered next; a message alone, again, until it has
        failed ``maxDeliveries`` times; then it is moved. Each failure is one WARNING line."""
        if hi <= lo:  # nothing to blame: the function fails on no message at all
            raise error
        cause = _root_cause(error)
        if hi - lo > 1:
            self._warn(delivery, lo, hi, cause, "delivering its halves")
            self.parts += [(lo + (hi - lo) // 2, hi), (lo, lo + (hi - lo) // 2)]
            return delivery
        if delivery.attempts + 1 < self.settings.max_deliveries:
            self._warn(delivery, lo, hi, cause, f"delivering it again (delivery {delivery.attempts + 1} of "
                                                f"maxDeliveries {self.settings.max_deliveries})")
            self.parts.append((lo, hi))
            time.sleep(min(0.1 * 2 ** delivery.attempts, 1.0))  # a transient failure may pass
            return replace(delivery, attempts=delivery.attempts + 1)
        self._warn(delivery, lo, hi, cause, f"moving it to the dead-letter queue (maxDeliveries "
                                            f"{self.settings.max_deliveries})")
        return self._move(delivery, lo, cause)

    def _warn(self, delivery: Delivery, lo: int, hi: int, cause: str, then: str) -> None:
        """The one line a failed delivery of messages ``lo..hi`` of the batch logs: where they
        are in the queue (first and last position, ``version:index``) and the error's root
        cause; Spark's own ERROR entries of the failed call are quieted by the shipped logging
        configuration (docs/operations.md, "When a consumer fails")."""
        first, last = self._positions(delivery, lo, hi - 1)
        where = f"message {first}" if hi - lo == 1 else f"{hi - lo} messages {first}..{last}"
        log.warning("queue %r subscription %r: batch %d, delivery of %s failed: %s; %s", self.queue.name,
                    self.owner.subscription, delivery.batch, where, cause, then)

    def _positions(self, delivery: Delivery, *at: int) -> list[str]:
        """Where messages ``at`` of the batch are in their queue, as ``version:index`` (the
        commit's version, then the message's place in it, as a dead letter's
        ``_origin_position`` and ``_origin_index`` say); one look at the cached batch."""
        from pyspark.sql import functions as F

        rows = {row[0]: row for row in self.numbered.filter(F.col(_ROW).isin(*set(at)))
                .select(_ROW, "_position", _IN_COMMIT).collect()}
        return [f"{rows[i][1]}:{_index_in_commit(delivery, rows[i][1], rows[i][2])}" if i in rows else "?" for i in at]

    def _move(self, delivery: Delivery, at: int, error: str) -> Delivery:
        """Move message ``at`` to the dead-letter queue, once, and record it done and moved (the
        subscription's ``dead_lettered_count`` counts it in the same write)."""
        queue, settings, subscription = self.queue, self.settings, self.owner.subscription
        if delivery.moved >= settings.max_dead_letters_per_batch:
            raise DeadLetterLimitError(queue.name, subscription, delivery.moved + 1,
                                       settings.max_dead_letters_per_batch, error)
        message = _part(self.numbered, at, at + 1, keep_index=True)
        version, in_commit = message.select("_position", _IN_COMMIT).first() or (0, 0)
        index = _index_in_commit(delivery, version, in_commit)
        dead_letters = self.owner.dead_letter_queue(self.spark, queue, settings)
        size = message.select(message_size(queue.spark_schema())).first()
        append_once(dead_letters, dead_letter_rows(message.drop(_IN_COMMIT), queue, subscription, index,
                                                   delivery.attempts + 1, error),
                    size[0] if size else 0, dead_letter_app_id(queue, subscription), version * TXN_SPAN + index)
        moved = replace(delivery, done=at + 1, lo=0, hi=0, attempts=0, moved=delivery.moved + 1)
        return self._record(moved, dead_lettered=1)

    def _record(self, delivery: Delivery, dead_lettered: int = 0) -> Delivery:
        self.recorded = _record(self.queue, self.owner.subscription, self.recorded, delivery, dead_lettered)
        return delivery


class _QuietQueryContext(logging.Filter):
    """Drops PySpark's ERROR entry of a failed call's query context (loggers
    ``DataFrameQueryContextLogger``, ``SQLQueryContextLogger``: JSON with the JVM stack, logged
    where the error is raised) while a failure dead letters handle is in flight in this thread;
    with ``spark_flow.spark.dead_letters`` at DEBUG it is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_handling, "on", False) or log.isEnabledFor(logging.DEBUG)


_handling = threading.local()  # on: a call whose failure dead letters handle runs in this thread


@functools.cache
def _quiet_query_context() -> None:
    """Add :class:`_QuietQueryContext` to PySpark's query-context loggers, once (made as PySpark
    makes them: its loggers take keywords a plain logger refuses)."""
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).addFilter(_QuietQueryContext())


@contextmanager
def quiet_failures(spark: SparkSession, handled: bool = True) -> Iterator[None]:
    """Mark the log entries of a call of the consumer's function whose failure is handled here
    (``handled``): PySpark's own (:class:`_QuietQueryContext`), and in classic Spark the JVM's
    of its tasks (a local property ``mdc.*``, which executors put in the log4j context of the
    call's tasks) and of the query's thread (its log4j context: a classic foreachBatch
    function's JVM calls run on that thread), which the shipped conf/log4j2.properties drops.
    A failure that ends the query is logged after the call, unmarked. A Spark Connect server's
    JVM logs for its administrator: nothing is marked there."""
    if not handled:
        yield
        return
    _quiet_query_context()
    _handling.on = True
    if is_connect(spark):
        try:
            yield
        finally:
            _handling.on = False
        return
    context = spark.sparkContext
    log4j = context._jvm.org.apache.logging.log4j.ThreadContext  # type: ignore[union-attr]
    context.setLocalProperty(QUIET_KEY, QUIET_VALUE)
    log4j.put(QUIET_KEY, QUIET_VALUE)
    try:
        yield
    finally:
        _handling.on = False
        context.setLocalProperty(QUIET_KEY, None)  # type: ignore[arg-type]
        log4j.remove(QUIET_KEY)


def _record(queue: Queue, subscription: str, was: str | None, delivery: Delivery, dead_lettered: int = 0) -> str:
    """Record ``delivery`` in the subscription's row, where it shows ``was`` (as read or last
    written); returns what it now shows. One query reads a subscription, so a lost
    compare-and-set means another query took it over."""
    text = delivery.to_json()
    if not queue.subscriptions.record_delivery(subscription, was, text, dead_lettered):
        raise SparkFlowError(f"subscription {subscription!r} of queue {queue.name!r}: its redelivery was "
                             "recorded by another query meanwhile; one query reads a subscription")
    return text


def _index_in_commit(delivery: Delivery, version: int, in_commit: int) -> int:
    """A message's place in its commit, from its place among the batch's messages of that
    commit: the batch's first commit may have begun at ``start_index``."""
    return in_commit + (delivery.start_index if version == delivery.start_version + 1 else 0)


def _numbered(batch: DataFrame) -> DataFrame:
    """The batch with each message's place in it (``_ROW``, in the order the source reads: by
    commit, then by content) and in its commit (``_IN_COMMIT``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [order_key(f.name, f.dataType) for f in batch.schema.fields if f.name not in _MESSAGE_COLUMNS]
    return (batch.withColumn(_ROW, F.row_number().over(Window.orderBy("_position", *keys)) - 1)
            .withColumn(_IN_COMMIT, F.row_number().over(Window.partitionBy("_position").orderBy(*keys)) - 1))


def _part(numbered: DataFrame, lo: int, hi: int, *, keep_index: bool = False) -> DataFrame:
    """Messages ``lo <= i < hi`` of the batch, with the source's columns only."""
    from pyspark.sql import functions as F

    part = numbered.filter((F.col(_ROW) >= lo) & (F.col(_ROW) < hi)).drop(_ROW)
    return part if keep_index else part.drop(_IN_COMMIT)


def _root_cause(error: BaseException) -> str:
    """An error as a dead letter records it: its root cause, the last exception named in its
    text (a JVM error's ``Caused by:``, a Python traceback's last line inside a task failure),
    as ``Class: message``; else its first line."""
    causes = [match for line in str(error).splitlines()
              if (match := _CAUSE.match(line.strip()))]
    if not causes:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return f"{type(error).__name__}: {lines[0] if lines else ''}"[:2000]
    kind, message = causes[-1].group(1).rsplit(".", 1)[-1], causes[-1].group(2) or ""
    return f"{kind}: {message}".strip()[:2000]
