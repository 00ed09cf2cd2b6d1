"""A producer's batch cut short by its query's stop (held or throttled between two chunks):
raised to Spark as the stop it is, not as a failure.

Spark counts a foreachBatch error as a stop (no ERROR log, no ``query.exception()``) only when
it is an interruption of the query's thread, and a Python function cannot raise one as
PySpark passes its errors on (a ``Py4JException`` with the Python traceback). The batch must
still fail, so that it is not committed and its restart writes the rest of it.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, NoReturn

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

from spark_flow.exceptions import HoldInterruptedError
from spark_flow.spark.session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def raise_as_a_stop(spark: SparkSession, stopped: HoldInterruptedError) -> NoReturn:
    """Raise ``stopped`` (the query was stopped while its batch was held or throttled: the batch
    must not be committed, its restart writes what is missing) as the stop it is.

    Spark takes a foreachBatch error for a stop, not a failure (no ERROR log, no
    ``query.exception()``), only when it is an interruption of the query's thread; ``stop()``
    interrupts that thread while it waits on py4j's socket, which ignores it. So classic
    PySpark gets, for Spark, a Java ``UncheckedIOException`` caused by an
    ``InterruptedIOException`` (an interruption as Spark's ``isInterruptionException`` reads
    one), handed to the JVM as the Java exception itself: py4j does that for a
    :class:`Py4JJavaError` when ``propagate_java_exceptions`` is on, which :class:`_StopParameters`
    turns on for this raise only. The batch still fails, so it is not committed. Under Spark
    Connect the server interrupts its own wait for the Python worker, which Spark counts as a
    stop."""
    if not is_connect(spark):
        gateway, jvm = spark.sparkContext._gateway, spark.sparkContext._jvm
        parameters = (getattr(gateway, "python_parameters", None)  # py4j's ClientServer (PySpark's pinned threads)
                      or getattr(gateway, "callback_server_parameters", None))
        if jvm is not None and parameters is not None:
            if not isinstance(parameters, _StopParameters):
                parameters.__class__ = type(type(parameters).__name__, (_StopParameters, type(parameters)), {})
            interrupted = jvm.java.io.UncheckedIOException(str(stopped), jvm.java.io.InterruptedIOException(str(stopped)))
            _raising_stop.on = True  # read by py4j on this thread, as it answers the JVM's call
            raise _HeldStop(str(stopped), interrupted) from stopped
    raise stopped


class _HeldStop(HoldInterruptedError, Py4JJavaError):  # type: ignore[misc]
    """The :class:`HoldInterruptedError` a batch stopped while held raises, carrying the Java
    interruption py4j hands to the JVM (see :func:`raise_as_a_stop`)."""

    def __str__(self) -> str:
        return str(self.errmsg)  # Py4JJavaError's would ask the JVM for the Java exception's stack


_raising_stop = threading.local()


class _StopParameters:
    """py4j's callback parameters with ``propagate_java_exceptions`` on only for the raise of
    :func:`raise_as_a_stop`, on its thread (every other error of a callback reaches the JVM
    as py4j sends it by default: a Py4JException with the Python traceback)."""

    @property
    def propagate_java_exceptions(self) -> bool:
        on = getattr(_raising_stop, "on", False)
        _raising_stop.on = False
        return on

    @propagate_java_exceptions.setter
    def propagate_java_exceptions(self, value: bool) -> None:
        pass  # py4j's own setting (off in PySpark) stays off


class _QuietStops(logging.Filter):
    """Drops py4j's log of a foreachBatch call that ended in a stop (its ERROR with the traceback
    of :class:`HoldInterruptedError`, which a notebook's logging prints): the stop is no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], (HoldInterruptedError, _HeldStop)))


def quiet_py4j_stops() -> None:
    """Add :class:`_QuietStops` to the loggers of py4j's callback servers, once."""
    for name in ("py4j.clientserver", "py4j.java_gateway"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietStops) for f in logger.filters):
            logger.addFilter(_QuietStops())
