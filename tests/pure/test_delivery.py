"""A batch delivered again in parts, as its subscription's delivery record reports it for the
query's progress (spark_flow.spark.delivery.Delivery), without Spark."""

from __future__ import annotations

from spark_flow.spark.delivery import BatchDelivery, Delivery


def test_a_redelivered_batch_is_reported_while_it_lasts_and_once_it_is_over() -> None:
    """The batch's messages, those moved and the deliveries after the first: from the record
    while it is the batch's, then from the recent reports the next batch's record keeps (a
    query's progress is told after the fact); a batch delivered once has none."""
    during = Delivery(extra=2, batch=7, done=20, call=9, moved=1, taken=20, redelivered=40)
    assert during.report(7) == BatchDelivery(20, 1, 40) and BatchDelivery(20, 1, 40).processed == 19
    assert Delivery(batch=7, done=5, lo=5, hi=10).report(7) is None, "not over: nothing taken yet"

    over = Delivery.parse(during.finished().to_json())
    assert (over.extra, over.batch, over.report(7)) == (11, -1, BatchDelivery(20, 1, 40))
    assert over.report(8) is None and Delivery.parse(None).report(7) is None


def test_the_recent_reports_are_the_last_eight() -> None:
    delivery = Delivery()
    for batch in range(10):
        delivery = Delivery.parse(Delivery(delivery.extra, batch, taken=batch + 1, recent=delivery.recent)
                                  .finished().to_json())
    assert [delivery.report(batch) for batch in (0, 1)] == [None, None]
    assert [r.taken for r in (delivery.report(batch) for batch in range(2, 10)) if r] == list(range(3, 11))


def test_a_record_written_before_the_reports_reads_as_none() -> None:
    """A subscription's delivery recorded by an earlier spark-flow (no taken, redelivered nor
    recent): read as it was, reporting nothing."""
    old = '{"attempts": 0, "batch": 3, "call": 4, "done": 9, "extra": 1, "hi": 0, "lo": 0, "moved": 1, ' \
          '"start_index": 0, "start_version": 2}'
    delivery = Delivery.parse(old)
    assert (delivery.batch, delivery.call, delivery.report(3)) == (3, 4, None)
