"""A subscription's record of a failed batch delivered again in parts by
:class:`~spark_flow.spark.dead_letters.DeadLetters` (JSON in its ``delivery`` column), and what
a batch's progress report reads from it: the messages the batch took, moved and delivered again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

#: Reports of batches delivered again kept in a subscription's delivery, after they are over.
_RECENT = 8


@dataclass(frozen=True)
class Delivery:
    """Deliveries of a subscription's batches, as its row records them: ``extra``, the calls
    earlier redeliveries made beyond one per batch (batch ids move on by them); and the batch
    being delivered again (``batch``, -1 when none): the messages ``done`` (processed or moved,
    in the batch's order), the part in flight (``lo``, ``hi``) and its ``call``, the failed
    deliveries alone of the message at ``done`` (``attempts``), the messages ``moved`` to the
    dead-letter queue; where the batch began (``start_version``, ``start_index``: the position
    the subscription had acknowledged when it was first delivered), which numbers a message
    within its commit however the position moves on meanwhile (an expiry). For the batch's
    progress report (:meth:`report`): its messages (``taken``, once the parts are done) and
    the messages ``redelivered`` (in every call after the first); the reports of the last
    batches delivered again are kept in ``recent`` once they are over."""

    extra: int = 0
    batch: int = -1
    start_version: int = -1
    start_index: int = 0
    done: int = 0
    lo: int = 0
    hi: int = 0
    call: int = 0
    attempts: int = 0
    moved: int = 0
    taken: int = 0
    redelivered: int = 0
    recent: tuple[tuple[int, int, int, int], ...] = ()  # (batch, taken, moved, redelivered), oldest first

    def batch_id(self, batch: int) -> int:
        """The batch id of a call of the consumer's function: increasing, unique per call."""
        return batch + self.extra + (self.call if batch == self.batch else 0)

    def finished(self) -> Delivery:
        """The delivery once its batch is over: its calls beyond the first move later ids on; its
        report is kept among the recent ones (a query's progress is told after the fact, maybe
        once the next batch has begun)."""
        if self.batch < 0:
            return self
        recent = (*self.recent, (self.batch, self.taken, self.moved, self.redelivered))[-_RECENT:]
        return Delivery(self.extra + self.call, recent=recent)

    def report(self, batch: int) -> BatchDelivery | None:
        """What Spark's batch ``batch`` took, moved and delivered again, if it was delivered again
        in parts and its report is still kept; None for a batch delivered once (or long ago)."""
        if batch == self.batch and self.taken:
            return BatchDelivery(self.taken, self.moved, self.redelivered)
        kept = [BatchDelivery(*numbers) for number, *numbers in self.recent if number == batch]
        return kept[-1] if kept else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> Delivery:
        if not text:
            return cls()
        fields = json.loads(text)
        recent = tuple((int(b), int(t), int(m), int(r)) for b, t, m, r in fields.pop("recent", ()))
        return cls(**fields, recent=recent)


@dataclass(frozen=True)
class BatchDelivery:
    """One batch delivered again in parts, for its progress report: its messages (``taken``,
    each once), those ``moved`` to the dead-letter queue, and the deliveries after the first
    (``redelivered``: a message in three failing parts counts three), which Spark's
    ``numInputRows`` counts as input rows too."""

    taken: int
    moved: int
    redelivered: int

    @property
    def processed(self) -> int:
        """The messages the consumer's function processed: all but those moved."""
        return self.taken - self.moved
