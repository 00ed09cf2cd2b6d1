"""Ring queues: a subscription deeper than the queue's max loses its oldest messages, as Qpid's
RING policy and ActiveMQ's pending-message limit discard them.

Each subscription is moved past the fewest of its oldest messages that bring it within the max
(``maxCount`` and ``maxSize``), inside a commit too, and the newest message is always kept: a
ring of 250 given one commit of 1,000 keeps that commit's newest 250. What is skipped is
counted in the subscription's ``discarded_count``, never silently.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from spark_flow.rules.depth import Commit, Depth, Position

if TYPE_CHECKING:
    from spark_flow.flow.queue import Queue
    from spark_flow.rules.settings import QueueSettings


def discard_oldest(queue: Queue, settings: QueueSettings) -> dict[str, int]:
    """Move each subscription of ``queue`` deeper than its max past its oldest messages until it
    holds exactly the max (as of the queue's last refresh); return the messages discarded per
    subscription."""
    limit = Depth(settings.max_count, settings.max_size)
    if not limit.count and not limit.size:
        return {}
    latest = queue.version()
    discarded = {}
    for sub, depth in queue.backlog(refresh=False):
        position, dropped = sub.acknowledged, 0
        for commit in queue.ledger.commits(position.version, latest):
            if not _over(depth, limit):
                break
            first = position.index if commit.version == position.version + 1 else 0
            last = _fewest_to_drop(commit, first, depth, limit)
            if commit.version == latest:
                last = min(last, max(first, commit.count - 1))
            gone = commit.part(first, last)
            depth = Depth(depth.count - gone.count, depth.size - gone.size)
            dropped += gone.count
            position = Position(commit.version) if last == commit.count else Position(commit.version - 1, last)
        if position > sub.acknowledged:
            queue.acknowledge(sub.name, position, discarded=dropped)
            discarded[sub.name] = dropped
    return discarded


def _over(depth: Depth, limit: Depth) -> bool:
    return bool((limit.count and depth.count > limit.count) or (limit.size and depth.size > limit.size))


def _fewest_to_drop(commit: Commit, first: int, depth: Depth, limit: Depth) -> int:
    """The end of the fewest of ``commit``'s messages from ``first`` on whose discard brings
    ``depth`` within ``limit`` (the whole commit if even that does not)."""
    def fits(last: int) -> bool:
        gone = commit.part(first, last)
        return not _over(Depth(depth.count - gone.count, depth.size - gone.size), limit)

    return min(bisect.bisect_left(range(first, commit.count + 1), True, key=fits) + first, commit.count)
