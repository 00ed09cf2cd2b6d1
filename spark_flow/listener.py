"""Flow control in query progress: a StreamingQueryListener that reports, for each producer and
consumer query, the queue's depth, ``flowStopped``, ``flowStoppedCount`` and the time held.

Producers are found by their :class:`~spark_flow.sink.QueueSink` (registered by query id when it
runs), consumers by their ``flowqueue`` offsets, which name the queue and subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.streaming import StreamingQueryListener

from spark_flow.queue import open_queue
from spark_flow.sink import SINKS
from spark_flow.source import flowqueue_offset
from spark_flow.storage import session_storage_options

log = logging.getLogger("spark_flow.listener")


@dataclass(frozen=True)
class FlowProgress:
    """Flow control as one query saw it in its last micro-batch."""

    query_id: str
    query_name: str | None
    role: str  # "producer" or "consumer"
    queue: str
    subscription: str | None
    batch_id: int
    depth_count: int
    depth_size: int
    flow_stopped: bool
    flow_stopped_count: int
    held_seconds: float


class FlowProgressListener(StreamingQueryListener):
    """Keeps the last :class:`FlowProgress` of every query that produces to or consumes from a
    queue, and logs it (logger ``spark_flow.listener``) at every progress event.

    Examples
    --------
    >>> listener = FlowProgressListener()
    >>> spark.streams.addListener(listener)
    >>> listener.progress[str(query.id)]   # [FlowProgress(role='producer', queue='events', ...)]

    ``storage_options`` (deltalake's, for queues on object storage) default to those of the
    session active when the listener is made.
    """

    def __init__(self, storage_options: Mapping[str, str] | None = None) -> None:
        self.progress: dict[str, list[FlowProgress]] = {}
        if storage_options is None:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
            storage_options = session_storage_options(spark) if spark is not None else {}
        self.storage_options = dict(storage_options)

    def onQueryStarted(self, event: object) -> None:
        """Nothing is known before the first batch."""

    def onQueryIdle(self, event: object) -> None:
        """An idle query keeps its last progress."""

    def onQueryTerminated(self, event: object) -> None:
        """A stopped query's last progress stays, for the post-mortem."""

    def onQueryProgress(self, event: object) -> None:
        progress = event.progress  # type: ignore[attr-defined]
        query_id, name, batch_id = str(progress.id), progress.name, progress.batchId
        found = []
        sink = SINKS.get(query_id)
        for report in (sink.last.values() if sink else []):
            if report.batch_id == batch_id:
                found.append(FlowProgress(query_id, name, "producer", report.queue, None, batch_id,
                                          report.depth.count, report.depth.size, report.flow_stopped,
                                          report.flow_stopped_count, report.held_seconds))
        for source in progress.sources:
            offset = flowqueue_offset(source.endOffset)
            if offset is not None:
                queue = open_queue(offset["queue"], self.storage_options)
                depth = queue.depth(offset["subscription"])
                sub = queue.subscriptions.get(offset["subscription"])
                found.append(FlowProgress(query_id, name, "consumer", queue.name, sub.name, batch_id, depth.count,
                                          depth.size, sub.flow_stopped, sub.flow_stopped_count, 0.0))
        if found:
            self.progress[query_id] = found
        for flow in found:
            log.info("%s %s batch %d queue %r%s: depth %d messages / %d bytes, flowStopped %s, "
                     "flowStoppedCount %d, held %.1fs", flow.role, name or query_id, batch_id, flow.queue,
                     f" subscription {flow.subscription!r}" if flow.subscription else "", flow.depth_count,
                     flow.depth_size, str(flow.flow_stopped).lower(), flow.flow_stopped_count, flow.held_seconds)
