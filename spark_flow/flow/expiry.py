"""Message expiry: a queue's ``messageTtl``, as RabbitMQ's ``x-message-ttl``, Pulsar's message
TTL and NATS JetStream's ``MaxAge`` define it.

A message older than the queue's ``messageTtl`` is not delivered to a subscription that has not
read it and no longer counts in its depth: the subscription is moved past it, and the messages
skipped are counted in its ``expired_count``, never silently. A subscription that keeps up loses
nothing. Messages of one commit were enqueued together, at its time, so they expire together
(with the rest of a commit a subscription is inside). Whoever looks at a queue expires what is
due (the consumer's source before it plans a batch, gates, the controller): the move is
monotonic, so two processes expiring at once count the messages once.

With ``stopAge``: the oldest message a subscription waits for is never older than the TTL, so a
``stopAge`` at or above it is refused (it could never stop the flow). With a ring policy, expiry
comes first and the ring discards from what is left; each counts its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from spark_flow.rules.depth import Position

if TYPE_CHECKING:
    from spark_flow.flow.queue import Queue
    from spark_flow.rules.settings import QueueSettings


def expire(queue: Queue, settings: QueueSettings, now_ms: int | None = None) -> dict[str, int]:
    """Move each subscription of ``queue`` past the messages older than its ``messageTtl`` (as of
    the queue's last refresh); return the messages expired per subscription."""
    if not settings.message_ttl:
        return {}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff, latest = now - settings.message_ttl * 1000, queue.version()
    expired = {}
    for sub in queue.subscriptions.list():
        position, count = sub.acknowledged, 0
        for commit in queue.ledger.commits(position.version, latest):
            if commit.timestamp >= cutoff:
                break
            count += commit.count - (position.index if commit.version == position.version + 1 else 0)
            position = Position(commit.version)
        if position > sub.acknowledged:
            queue.acknowledge(sub.name, position, expired=count)
            expired[sub.name] = count
    return expired
