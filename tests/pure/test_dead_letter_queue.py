"""A dead-letter queue is checked where it is named, without Spark: ``FlowAdmin.set`` (so the
CLI's ``set`` and the console's) and a process's Spark conf (``record_queue_conf``) refuse the
queue itself, a cycle of dead-letter queues and an existing table whose columns cannot take the
dead letters, in one line naming the key, the value and what is allowed, before anything is
written; ``declare``'s checks are in tests/session/test_dead_letter_queue.py."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from support.homes import SCHEMA, make_queue

from spark_flow.cli import main
from spark_flow.exceptions import DeadLetterQueueError
from spark_flow.flow.conf_record import record_queue_conf
from spark_flow.flow.queue import Queue
from spark_flow.ops.admin import FlowAdmin

#: The columns of a dead letter of a ``support.homes`` queue (``id``, ``body``), as the consumer appends it.
DEAD_LETTER = pa.schema([*SCHEMA, ("_origin_queue", pa.string()), ("_origin_subscription", pa.string()),
                         ("_origin_position", pa.int64()), ("_origin_index", pa.int64()),
                         ("_origin_enqueue_time", pa.timestamp("us", tz="UTC")), ("_error", pa.string()),
                         ("_deliveries", pa.int64()), ("_dead_lettered_at", pa.timestamp("us", tz="UTC"))])


def commands(admin: FlowAdmin) -> list[str]:
    return [c.command for c in admin.commands.read()]


def test_set_refuses_the_queue_itself_by_path_or_name_and_records_nothing(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    orders, admin = make_queue(home, "orders", {"maxDeliveries": 3}), FlowAdmin(home)
    for itself in (orders.path, orders.path + "/", "orders"):
        with pytest.raises(DeadLetterQueueError, match=rf"^deadLetterQueue='{re.escape(itself)}' is not valid: allowed is a "
                                                       r"queue other than 'orders' itself\. Its dead letters carry "
                                                       r"the dead-letter columns \(_origin_queue, .*\), which it "
                                                       r"has not$"):
            admin.set("orders", deadLetterQueue=itself)
    assert commands(admin) == []
    admin.set("orders", deadLetterQueue=str(tmp_path / "queues" / "orders_failed"))  # a new queue
    assert commands(admin) == ["set"]


@pytest.mark.parametrize("length", [2, 3])
def test_set_refuses_a_cycle_of_dead_letter_queues(tmp_path: Path, length: int) -> None:
    """``a -> b -> a`` and ``a -> b -> c -> a`` (RabbitMQ's suite dead-letters round a cycle):
    the last link is refused, naming the way round."""
    home, admin = str(tmp_path / "home"), FlowAdmin(str(tmp_path / "home"))
    names = ["a", "b", "c"][:length]
    queues = [make_queue(home, name) for name in names]
    for queue, then in itertools.pairwise(queues):
        queue.runtime_settings.apply({"deadLetterQueue": then.name}, 0)  # as the controller applies a set
    last = names[-1]
    with pytest.raises(DeadLetterQueueError, match=rf"^deadLetterQueue='a' is not valid: allowed is a queue whose "
                                                   rf"dead letters do not lead back to '{last}'\. Dead letters "
                                                   rf"would go round: {last} -> {' -> '.join(names)}$"):
        admin.set(last, deadLetterQueue="a")
    assert commands(admin) == []


def test_set_refuses_an_existing_table_without_the_dead_letter_columns(tmp_path: Path) -> None:
    """A queue of the origin's columns only (what would fail at the first dead letter with a
    SchemaMismatchError) is refused; one with them and the dead-letter columns is taken."""
    home = str(tmp_path / "home")
    make_queue(home, "orders")
    same_columns, admin = make_queue(home, "other"), FlowAdmin(home)
    with pytest.raises(DeadLetterQueueError, match=r"^deadLetterQueue='other' is not valid: allowed is a new queue, "
                                                   r"or one with the columns of 'orders' then the dead-letter "
                                                   r"columns: <struct<id:bigint,body:string,_origin_queue:string,"
                                                   r".*>>\. The table there has <struct<id:bigint,body:string>>$"):
        admin.set("orders", deadLetterQueue="other")
    ready = str(tmp_path / "queues" / "ready")
    write_deltalake(ready, DEAD_LETTER.empty_table())
    admin.set("orders", {"flow.deadLetterQueue": ready})
    assert commands(admin) == ["set"] and same_columns.settings().dead_letter_queue is None


def test_the_cli_set_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    orders = make_queue(home, "orders")
    assert main(["--home", home, "set", "orders", f"deadLetterQueue={orders.path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spark-flow set: error: deadLetterQueue='{orders.path}' is not valid: allowed is a queue "
                          "other than 'orders' itself") and len(err.splitlines()) == 1, err
    assert commands(FlowAdmin(home)) == []


def test_a_conf_dead_letter_queue_is_checked_where_a_process_records_it(tmp_path: Path) -> None:
    """A cycle or wrong columns from the conf is refused with the conf's key and nothing is
    recorded; a conf key for every queue does not make the queue it names its own."""
    home = str(tmp_path / "home")
    orders, other = make_queue(home, "orders"), make_queue(home, "other")
    key = "spark.flow.queues.orders.deadLetterQueue"
    with pytest.raises(DeadLetterQueueError, match=rf"^{key}='{re.escape(other.path)}' is not valid: allowed is a new queue"):
        record_queue_conf(orders, {key: other.path, "spark.flow.stopCount": "7"})
    assert "flow.stopCount" not in Queue(orders.path).properties(), "the whole refused, nothing recorded"
    dead = str(tmp_path / "queues" / "shared_dlq")
    assert record_queue_conf(orders, {"spark.flow.deadLetterQueue": dead}).dead_letter_queue == dead
    assert record_queue_conf(other, {"spark.flow.deadLetterQueue": other.path}).dead_letter_queue is None
