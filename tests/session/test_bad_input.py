"""Every bad configuration and malformed batch, in one table (docs/design.md 3.7).

Each case names the exception class and matches its message (the key or column, the value, and
what is allowed). After each case the test also checks that nothing moved: the queues' Delta
versions, rows, properties, subscriptions (positions = nothing acknowledged, flow state) and
history are as they were, the plain Delta table and the Parquet folder are untouched, and no
file appeared under the case's ``tmp_path`` (where the "unknown" paths point).

Shared fixtures (module scope, declared once): ``events`` (``id BIGINT, body STRING``, no flow
settings, so any call that wrongly passes validation writes and fails the check) and ``orders``
(``id BIGINT, body STRING, sz BIGINT`` with stop 20 / resume 10), each holding one message.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from support.bad_values import CONF_VALUES, DURATION, ON_FULL, POLICIES, SIZE, WHOLE

from spark_flow.exceptions import (
    ConfigurationError,
    PositionOutOfRangeError,
    QueueFullError,
    QueueNotFoundError,
    QueueSettingError,
    SchemaMismatchError,
    SubscriptionNotFoundError,
    UnknownKeyError,
)
from spark_flow.flow.queue import Queue
from spark_flow.spark.declare import declare, purge_acknowledged
from spark_flow.spark.sink import QueueSink
from spark_flow.spark.source import FlowQueueDataSource, read_queue

pytestmark = pytest.mark.timeout(120)

EVENTS = "id BIGINT, body STRING"
ORDERS = "id BIGINT, body STRING, sz BIGINT"


@dataclass
class World:
    """What a case acts on: the shared queues and tables, and the case's own empty folder."""

    spark: SparkSession
    events: Queue
    orders: Queue
    plain: str  # a Delta table that is not a queue
    parquet: str  # a folder of Parquet files
    checkpoints: Path
    tmp: Path

    def batch(self, rows: list[tuple] | None = None, schema: str = EVENTS) -> DataFrame:
        return self.spark.createDataFrame(rows if rows is not None else [(100, "m100"), (101, "m101")], schema)

    def consume(self, stream: DataFrame) -> None:
        """Run ``stream`` to the end of what is available (noop sink), raising what it raised."""
        query = (stream.writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(self.checkpoints / uuid.uuid4().hex)).start())
        try:
            query.awaitTermination(90)
            if query.exception() is not None:
                raise query.exception()
        finally:
            query.stop()


@dataclass(frozen=True)
class Case:
    action: Callable[[World], Any]
    error: type[BaseException]
    match: str
    conf: Mapping[str, str] = field(default_factory=dict)  # Spark conf set for the case only
    props: Mapping[str, str | None] = field(default_factory=dict)  # orders' table properties for the case (None: unset)


def case(case_id: str, action: Callable[[World], Any], error: type[BaseException], match: str, *,
         conf: Mapping[str, str] | None = None, props: Mapping[str, str | None] | None = None,
         marks: Any = ()) -> Any:
    return pytest.param(Case(action, error, match, dict(conf or {}), dict(props or {})), id=case_id, marks=marks)


def bad(key: str, value: Any, allowed: str) -> str:
    """The regex of a ConfigurationError message: ``key=value is not valid: allowed is ...``."""
    return re.escape(f"{key}={value!r} is not valid: allowed is {allowed}")


def unknown(key: str, closest: str) -> str:
    return re.escape(f"{key}=") + ".*" + re.escape(f"is not valid: allowed is a known spark-flow key. Did you mean {closest!r}?")


# --- actions ------------------------------------------------------------------------------


def sink_events(options: Mapping[str, Any] | None = None, rows: list[tuple] | None = None, schema: str = EVENTS,
                **kwargs: Any) -> Callable[[World], None]:
    """A direct call of a sink into ``events`` (a fresh app id: a wrong success would write)."""
    def act(w: World) -> None:
        QueueSink(w.events.path, options=options, app_id=f"bad-{uuid.uuid4().hex}", **kwargs)(w.batch(rows, schema), 0)
    return act


def sink_orders(w: World) -> None:
    QueueSink(w.orders.path, app_id=f"bad-{uuid.uuid4().hex}")(w.batch([(100, "m100", 5)], ORDERS), 0)


def sink_two_orders(w: World) -> None:
    QueueSink(w.orders.path, app_id=f"bad-{uuid.uuid4().hex}")(w.batch([(100, "m100", 5), (101, "m101", 7)], ORDERS), 0)


#: orders' properties made a ring-strict queue (its thresholds removed: a ring has none)
RING_STRICT = {"flow.policy": "ring-strict", "flow.stopCount": None, "flow.resumeCount": None}


def sink_to(target: Callable[[World], str]) -> Callable[[World], None]:
    def act(w: World) -> None:
        QueueSink(target(w), app_id=f"bad-{uuid.uuid4().hex}")(w.batch(), 0)
    return act


def route(dests: Callable[[World], list[str | None]]) -> Callable[[World], None]:
    """A routed batch: row i goes to ``dests(w)[i]`` (``events`` rows first when both are named)."""
    def act(w: World) -> None:
        rows = [(100 + i, f"m{100 + i}", dest) for i, dest in enumerate(dests(w))]
        batch = w.spark.createDataFrame(rows, "id BIGINT, body STRING, dest STRING")
        QueueSink(route_column="dest", app_id=f"bad-{uuid.uuid4().hex}")(batch, 0)
    return act


def declare_new(settings: Mapping[str, Any] | None = None, schema: str | None = EVENTS) -> Callable[[World], None]:
    return lambda w: declare(w.spark, str(w.tmp / "new"), schema, settings=settings)


def declare_events(schema: str | None = EVENTS, settings: Mapping[str, Any] | None = None) -> Callable[[World], None]:
    return lambda w: declare(w.spark, w.events.path, schema, settings=settings)


def read_events(**options: Any) -> Callable[[World], None]:
    return lambda w: w.consume(read_queue(w.spark, w.events.path, **options))


def raw_source(**options: str) -> Callable[[World], None]:
    """``spark.readStream.format("flowqueue")`` with exactly these options."""
    def act(w: World) -> None:
        w.spark.dataSource.register(FlowQueueDataSource)
        reader = w.spark.readStream.format("flowqueue")
        for key, value in options.items():
            reader = reader.option(key, value.replace("{events}", w.events.path))
        w.consume(reader.load())
    return act


def source_with_schema(schema: str) -> Callable[[World], None]:
    """``format("flowqueue").schema(...)``: Spark 4.2 tells a Python data source of a user's
    schema only when the query starts."""
    def act(w: World) -> None:
        w.spark.dataSource.register(FlowQueueDataSource)
        w.consume(w.spark.readStream.format("flowqueue").schema(schema).option("queue", w.events.path).load())
    return act


# --- the table ----------------------------------------------------------------------------

ABOVE = " (a resume threshold above its stop threshold locks flow control on)"


CASES = [
    # -- Spark conf: every spark.flow.* key with a bad value, seen by a producer's batch --------
    *[case(f"conf {key}={value}", sink_events(), ConfigurationError, bad(f"spark.flow.{key}", value, allowed),
           conf={f"spark.flow.{key}": value}) for key, value, allowed in CONF_VALUES],
    case("conf pattern key bad value", sink_events(), ConfigurationError,
         bad("spark.flow.queues.*.capacity", "none", "a whole number >= 1"), conf={"spark.flow.queues.*.capacity": "none"}),
    case("conf bad value on declare", declare_new(), ConfigurationError, bad("spark.flow.maxSize", "huge", SIZE),
         conf={"spark.flow.maxSize": "huge"}),
    # -- unknown spark.flow.* keys name the closest one ---------------------------------------
    case("conf unknown key", sink_events(), UnknownKeyError, unknown("spark.flow.stopCuont", "spark.flow.stopCount"),
         conf={"spark.flow.stopCuont": "5"}),
    case("conf unknown snake key", sink_events(), UnknownKeyError,
         unknown("spark.flow.resume_size", "spark.flow.resumeSize"), conf={"spark.flow.resume_size": "1k"}),
    case("conf unknown pattern key", sink_events(), UnknownKeyError,
         unknown("spark.flow.queues.events.capacty", "spark.flow.queues.events.capacity"),
         conf={"spark.flow.queues.events.capacty": "5"}),
    case("conf unknown key on declare", declare_new(), UnknownKeyError,
         unknown("spark.flow.maxCuont", "spark.flow.maxCount"), conf={"spark.flow.maxCuont": "5"}),
    case("conf unknown key through the source", read_events(), AnalysisException,
         "(?i)spark.flow.stopCuont='5' is not valid: allowed is a known spark-flow key", conf={"spark.flow.stopCuont": "5"}),
    case("conf unknown key through the source names the closest", read_events(), AnalysisException,
         unknown("spark.flow.stopcuont", "spark.flow.stopCount"), conf={"spark.flow.stopCuont": "5"}),
    # -- resume above stop, in every layer ----------------------------------------------------
    case("conf resumeCount above stopCount", sink_events(), ConfigurationError,
         bad("spark.flow.resumeCount", "7", "a value <= spark.flow.stopCount=5" + ABOVE),
         conf={"spark.flow.stopCount": "5", "spark.flow.resumeCount": "7"}),
    case("conf resumeSize above stopSize", sink_events(), ConfigurationError,
         bad("spark.flow.resumeSize", "2048", "a value <= spark.flow.stopSize=1024" + ABOVE),
         conf={"spark.flow.stopSize": "1k", "spark.flow.resumeSize": "2k"}),
    case("conf default resume above default stop", sink_events(), ConfigurationError,
         bad("spark.flow.defaultResumeThreshold", "70", "a value <= spark.flow.defaultStopThreshold=60" + ABOVE),
         conf={"spark.flow.defaultStopThreshold": "60", "spark.flow.defaultResumeThreshold": "70"}),
    case("conf stopAge at the messageTtl: never reached", sink_events(), ConfigurationError,
         bad("spark.flow.stopAge", "60s", "a value < spark.flow.messageTtl=60s (messages expire before they are "
             "that old, so the age would never stop the flow)"),
         conf={"spark.flow.stopAge": "1min", "spark.flow.messageTtl": "60s"}),
    case("option stopCount: a queue setting", sink_events({"stopCount": 5, "resumeCount": 7}), QueueSettingError,
         bad("stopCount", 5, "a producer setting here") + ".*stopCount is a queue setting"),
    case("table property resume above the kept stop", sink_orders, ConfigurationError,
         bad("flow.resumeCount", "25", "a value <= flow.stopCount=20" + ABOVE), props={"flow.resumeCount": "25"}),
    case("declare resume above stop", declare_new({"stopCount": 5, "resumeCount": 9}), ConfigurationError,
         bad("flow.resumeCount", "9", "a value <= flow.stopCount=5" + ABOVE)),
    case("declare resumeAge above stopAge", declare_new({"stopAge": "3s", "resumeAge": "1 min"}), ConfigurationError,
         bad("flow.resumeAge", "60s", "a value <= flow.stopAge=3s" + ABOVE)),
    case("re-declare resume above the kept stop",
         lambda w: declare(w.spark, w.orders.path, ORDERS, settings={"resumeCount": 25}), ConfigurationError,
         bad("flow.resumeCount", "25", "a value <= flow.stopCount=20" + ABOVE)),
    # -- table properties set by hand (ALTER TABLE), seen by a producer ------------------------
    case("table property bad count", sink_orders, ConfigurationError, bad("flow.maxCount", "ten", WHOLE),
         props={"flow.maxCount": "ten"}),
    case("table property bad policy", sink_orders, ConfigurationError, bad("flow.policy", "drop", POLICIES),
         props={"flow.policy": "drop"}),
    case("table property bad Qpid alias", sink_orders, ConfigurationError, bad("qpid.flow_stop_size", "lots", SIZE),
         props={"qpid.flow_stop_size": "lots"}),
    case("table property unknown key", sink_orders, UnknownKeyError, unknown("flow.stopCuont", "flow.stopCount"),
         props={"flow.stopCuont": "5"}),
    case("table property unknown qpid key", sink_orders, UnknownKeyError,
         unknown("qpid.flow_stop_cnt", "qpid.flow_stop_count"), props={"qpid.flow_stop_cnt": "5"}),
    # -- declare settings -----------------------------------------------------------------------
    case("declare bad count", declare_new({"stopCount": "abc"}), ConfigurationError, bad("flow.stopCount", "abc", WHOLE)),
    case("declare bad Qpid size", declare_new({"qpid.flow_stop_size": "lots"}), ConfigurationError,
         bad("flow.stopSize", "lots", SIZE)),
    case("declare bad policy", declare_new({"policy": "drop"}), ConfigurationError, bad("flow.policy", "drop", POLICIES)),
    case("declare a producer setting", declare_new({"flow.capacity": 0}), ConfigurationError,
         bad("flow.capacity", 0, "a queue setting") + ".*capacity is a producer setting"),
    case("declare unknown key", declare_new({"stopCuont": 5}), UnknownKeyError, unknown("stopCuont", "stopCount")),
    case("declare unknown Qpid key", declare_new({"qpid.flow_stop_cnt": 5}), UnknownKeyError,
         unknown("qpid.flow_stop_cnt", "qpid.flow_stop_count")),
    case("re-declare bad size", declare_events(settings={"maxSize": "huge"}), ConfigurationError,
         bad("flow.maxSize", "huge", SIZE)),
    case("declare without schema", declare_new(schema=None), QueueNotFoundError,
         "queue 'new' not found: it does not exist yet, and a schema is needed to create it"),
    case("declare on non-Delta files", lambda w: declare(w.spark, w.parquet, EVENTS), QueueNotFoundError,
         "the path holds files that are not a Delta table"),
    case("re-declare another column type", declare_events("id BIGINT, body BINARY"), SchemaMismatchError,
         re.escape("schema does not match queue 'events': the existing table's columns differ from the declared "
                   "schema; queue has <struct<id:bigint,body:string>>, got <struct<id:bigint,body:binary>>")),
    case("re-declare another column name", declare_events("id BIGINT, text STRING"), SchemaMismatchError,
         re.escape("got <struct<id:bigint,text:string>>")),
    case("re-declare fewer columns", declare_events("id BIGINT"), SchemaMismatchError, re.escape("got <struct<id:bigint>>")),
    case("re-declare more columns", declare_events(ORDERS), SchemaMismatchError,
         re.escape("got <struct<id:bigint,body:string,sz:bigint>>")),
    # -- sink constructor -----------------------------------------------------------------------
    case("sink without queue or route column", lambda w: QueueSink(), ConfigurationError,
         bad("queue", None, "exactly one of queue or route_column")),
    case("sink with queue and route column", lambda w: QueueSink(w.events.path, route_column="dest"),
         ConfigurationError, "is not valid: allowed is exactly one of queue or route_column"),
    case("sink option capacity 0", sink_events({"capacity": 0}), ConfigurationError,
         bad("capacity", 0, "a whole number >= 1")),
    case("sink option bad onFull", sink_events({"onFull": "drop"}), ConfigurationError, bad("onFull", "drop", ON_FULL)),
    case("sink option policy: a queue setting", sink_events({"policy": "reject"}), QueueSettingError,
         "policy is a queue setting"),
    case("sink option bad timeout", sink_events({"rejectTimeout": "soon"}), ConfigurationError,
         bad("rejectTimeout", "soon", DURATION)),
    case("sink option bad poll interval", sink_events({"pollInterval": "-1s"}), ConfigurationError,
         bad("pollInterval", "-1s", DURATION + ", above 0")),
    case("sink option negative msgPublishRate", sink_events({"msgPublishRate": -100}), ConfigurationError,
         bad("msgPublishRate", -100, WHOLE)),
    case("sink option bytePublishRate in bits", sink_events({"bytePublishRate": "10 Mbit"}), ConfigurationError,
         bad("bytePublishRate", "10 Mbit", SIZE)),
    case("sink option stopSize: a queue setting", sink_events({"stopSize": "1.5b"}), QueueSettingError,
         "stopSize is a queue setting"),
    case("sink option producerFlowControl: a queue setting", sink_events({"producerFlowControl": "off"}),
         QueueSettingError, "producerFlowControl is a queue setting"),
    case("sink option unknown", sink_events({"capacty": 10}), UnknownKeyError, unknown("capacty", "capacity")),
    case("sink option conf key bad value", sink_events({"spark.flow.capacity": "0"}), ConfigurationError,
         bad("spark.flow.capacity", "0", "a whole number >= 1")),
    case("sink option unknown pattern key", sink_events({"spark.flow.queues.events.capcity": "5"}), UnknownKeyError,
         unknown("spark.flow.queues.events.capcity", "spark.flow.queues.events.capacity")),
    case("sink called outside a query without app_id",
         lambda w: QueueSink(w.events.path)(w.batch(), 0), ConfigurationError,
         bad("app_id", None, "a stable id for batches written outside a streaming query")),
    # -- unknown queues, non-Delta paths --------------------------------------------------------
    case("sink into a missing path", sink_to(lambda w: str(w.tmp / "nowhere")), QueueNotFoundError,
         "not found: there is no Delta table at this location"),
    case("sink into non-Delta files", sink_to(lambda w: w.parquet), QueueNotFoundError,
         "not found: there is no Delta table at this location"),
    case("sink into a Delta table not declared", sink_to(lambda w: w.plain), QueueNotFoundError,
         re.escape("not found: this Delta table is not declared as a queue (spark_flow.spark.declare)")),
    case("sink into an unknown catalog table", sink_to(lambda w: "no_such_queue_table"), QueueNotFoundError,
         "queue 'no_such_queue_table' not found: no such table in the catalog"),
    case("Queue handle on a missing path", lambda w: Queue(str(w.tmp / "nowhere")), QueueNotFoundError,
         "there is no Delta table at this location"),
    case("Queue handle on a plain Delta table", lambda w: Queue(w.plain), QueueNotFoundError,
         "not declared as a queue"),
    case("purge a missing path", lambda w: purge_acknowledged(w.spark, str(w.tmp / "nowhere")), QueueNotFoundError,
         "there is no Delta table at this location"),
    # -- malformed batches ----------------------------------------------------------------------
    case("batch missing a column", sink_events(rows=[(1,)], schema="id BIGINT"), SchemaMismatchError,
         re.escape("schema does not match queue 'events': missing columns ['body']")),
    case("batch with an extra column", sink_events(rows=[(1, "a", "x")], schema="id BIGINT, body STRING, extra STRING"),
         SchemaMismatchError, re.escape("unknown columns ['extra']")),
    case("batch with a wrong type", sink_events(rows=[("1", "a")], schema="id STRING, body STRING"),
         SchemaMismatchError, re.escape("id is string, queue has bigint; queue has <struct<id:bigint,body:string>>")),
    case("batch with renamed columns", sink_events(rows=[(1, "a")], schema="ID BIGINT, Body STRING"),
         SchemaMismatchError, re.escape("missing columns ['id', 'body']; unknown columns ['ID', 'Body']")),
    case("size column missing", sink_events(size_column="weight"), AnalysisException,
         r"UNRESOLVED_COLUMN.*`weight`"),
    case("route column missing", lambda w: QueueSink(route_column="dest", app_id="r")(w.batch(), 0),
         SchemaMismatchError, "route column 'dest' is not in the batch"),
    case("route column null", route(lambda w: [w.events.path, None]), SchemaMismatchError,
         "route column 'dest' is null in some rows"),
    case("route to an unknown queue", route(lambda w: [w.events.path, str(w.tmp / "nowhere")]), QueueNotFoundError,
         "there is no Delta table at this location"),
    case("route to a queue of another schema", route(lambda w: [w.events.path, w.orders.path]), SchemaMismatchError,
         re.escape("schema does not match queue 'orders': missing columns ['sz']")),
    case("ring-strict batch above maxCount", sink_two_orders, QueueFullError,
         re.escape("queue 'orders' refused the batch: ring-strict queue cannot take a batch of 2 messages / 40 bytes "
                   "above its max"), props={**RING_STRICT, "flow.maxCount": "1"}),
    case("ring-strict batch above maxSize", sink_two_orders, QueueFullError,
         "ring-strict queue cannot take a batch of 2 messages / 40 bytes", props={**RING_STRICT, "flow.maxSize": "20"}),
    case("ring queue without a max", sink_orders, ConfigurationError,
         bad("flow.policy", "ring", "a ring policy with maxCount or maxSize above 0"), props={"flow.policy": "ring"}),
    case("stop above the max", sink_orders, ConfigurationError, bad("flow.stopCount", "20", "a value <= flow.maxCount=10"),
         props={"flow.maxCount": "10"}),
    case("pacing without flow control", sink_orders, ConfigurationError,
         bad("flow.pacing", "true", "pacing with a stopCount (or maxCount) above 0, policy flow and producerFlowControl "
             "true"), props={"flow.pacing": "true", "flow.producerFlowControl": "false"}),
    # -- source options (read_queue, format("flowqueue")) ---------------------------------------
    case("source without queue option", raw_source(), AnalysisException,
         bad("queue", None, "the queue table's path")),
    case("source on a missing path", lambda w: w.consume(read_queue(w.spark, str(w.tmp / "nowhere"))),
         AnalysisException, "not found: there is no Delta table at this location"),
    case("source on a plain Delta table", lambda w: w.consume(read_queue(w.spark, w.plain)), AnalysisException,
         "not declared as a queue"),
    case("source on an unknown catalog table", lambda w: read_queue(w.spark, "no_such_queue_table"),
         QueueNotFoundError, "no such table in the catalog"),
    case("source maxRecordsPerTrigger negative", read_events(maxRecordsPerTrigger=-1), AnalysisException,
         bad("maxRecordsPerTrigger", "-1", "a whole number >= 1")),
    case("source maxRecordsPerTrigger zero", read_events(maxRecordsPerTrigger=0), AnalysisException,
         bad("maxRecordsPerTrigger", "0", "a whole number >= 1")),
    case("source maxRecordsPerTrigger not a number", read_events(maxRecordsPerTrigger="lots"), AnalysisException,
         bad("maxRecordsPerTrigger", "lots", "a whole number >= 1")),
    case("source maxBytesPerTrigger negative", read_events(maxBytesPerTrigger=-1), AnalysisException,
         bad("maxBytesPerTrigger", "-1", "bytes as a whole number >= 1, or with a unit: 8k, 10 MB")),
    case("source maxBytesPerTrigger zero", read_events(maxBytesPerTrigger="0m"), AnalysisException,
         bad("maxBytesPerTrigger", "0m", "bytes as a whole number >= 1, or with a unit: 8k, 10 MB")),
    case("source maxBytesPerTrigger unknown unit", read_events(maxBytesPerTrigger="10 parsecs"), AnalysisException,
         bad("maxBytesPerTrigger", "10 parsecs", "bytes as a whole number >= 1, or with a unit: 8k, 10 MB")),
    case("source minRecordsPerTrigger zero", read_events(minRecordsPerTrigger=0), AnalysisException,
         bad("minRecordsPerTrigger", "0", "a whole number >= 1")),
    case("source maxTriggerDelay not a duration", read_events(minRecordsPerTrigger=5, maxTriggerDelay="soon"),
         AnalysisException, bad("maxTriggerDelay", "soon", DURATION + ", above 0")),
    case("source maxTriggerDelay without minRecordsPerTrigger", read_events(maxTriggerDelay="5s"), AnalysisException,
         bad("maxTriggerDelay", "5s", "a duration together with minRecordsPerTrigger")),
    case("source minRecordsPerTrigger above maxRecordsPerTrigger",
         read_events(minRecordsPerTrigger=20, maxRecordsPerTrigger=15), AnalysisException,
         bad("minRecordsPerTrigger", "20", "a whole number <= maxRecordsPerTrigger=15")),
    case("source with a user-specified schema", source_with_schema("id BIGINT"), StreamingQueryException,
         bad("schema", "struct<id:bigint>", "no user-specified schema: a flowqueue source's schema is its queue's "
             "columns, then _position and _enqueue_time (struct<id:bigint,body:string,_position:bigint,"
             "_enqueue_time:timestamp>)")),
    case("source with the queue's own schema given", source_with_schema(
         "id BIGINT, body STRING, _position BIGINT, _enqueue_time TIMESTAMP"), StreamingQueryException,
         bad("schema", "struct<id:bigint,body:string,_position:bigint,_enqueue_time:timestamp>",
             "no user-specified schema")),
    case("source maxPartitions zero", read_events(maxPartitions=0), AnalysisException,
         bad("maxPartitions", "0", "a whole number >= 1")),
    case("source bad startingPosition", read_events(startingPosition="middle"), AnalysisException,
         bad("startingPosition", "middle", "earliest or latest")),
    case("source unknown option", read_events(maxRecordPerTrigger=5), AnalysisException,
         "(?i)maxRecordPerTrigger='5' is not valid: allowed is a known spark-flow key. "
         "Did you mean 'maxRecordsPerTrigger'"),
    case("source unknown subscription", read_events(subscription="nobody"), StreamingQueryException,
         re.escape("subscription 'nobody' does not exist on queue 'events': allowed is one of 'audit', 'default'")),
    case("source downstream missing", read_events(downstream="/nonexistent/spark-flow/queue"), StreamingQueryException,
         "queue '/nonexistent/spark-flow/queue' not found"),
    case("source with a producer setting", read_events(capacity="none"), AnalysisException,
         bad("capacity", "none", "an option of the flowqueue source")),
    case("source with a queue setting", read_events(stopCount="5"), AnalysisException,
         "stopCount is a queue setting"),
    case("source downstream with a bad conf value",
         lambda w: w.consume(read_queue(w.spark, w.events.path, downstream=w.orders.path,
                                        **{"spark.flow.capacity": "none"})),
         AnalysisException, bad("spark.flow.capacity", "none", "a whole number >= 1")),
    # -- subscriptions and acknowledgements -------------------------------------------------------
    case("create subscription at an unknown position", lambda w: w.events.create_subscription("x", "middle"),
         ConfigurationError, bad("startingPosition", "middle", "earliest, latest, or a queue version >= -1")),
    case("create subscription before the start", lambda w: w.events.create_subscription("x", -2),
         ConfigurationError, bad("startingPosition", -2, "earliest, latest, or a queue version >= -1")),
    case("create subscription with a blank name", lambda w: w.events.create_subscription(" "), UnknownKeyError,
         bad("subscription", " ", "a known spark-flow key")),
    case("acknowledge an unknown subscription", lambda w: w.events.acknowledge("nobody", 1), SubscriptionNotFoundError,
         "subscription 'nobody' does not exist on queue 'events'"),
    case("drop an unknown subscription", lambda w: w.events.drop_subscription("nobody"), SubscriptionNotFoundError,
         "subscription 'nobody' does not exist on queue 'events'"),
    case("depth of an unknown subscription", lambda w: w.events.depth("nobody"), SubscriptionNotFoundError,
         "subscription 'nobody' does not exist on queue 'events'"),
    case("acknowledge beyond the queue's end", lambda w: w.events.acknowledge("default", w.events.refresh() + 100),
         PositionOutOfRangeError, "cannot acknowledge up to position .*allowed is a queue version <="),
]


# --- fixtures and the test ------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("bad_input")
    events = declare(spark, str(base / "events"), EVENTS)
    QueueSink(events.path, app_id="setup")(spark.createDataFrame([(0, "m0")], EVENTS), 0)
    events.create_subscription("audit", "earliest")
    orders = declare(spark, str(base / "orders"), ORDERS, settings={"stopCount": 20, "resumeCount": 10})
    QueueSink(orders.path, app_id="setup")(spark.createDataFrame([(0, "m0", 3)], ORDERS), 0)
    plain, parquet = str(base / "plain"), str(base / "parquet")
    spark.createDataFrame([(0, "m0")], EVENTS).write.format("delta").save(plain)
    spark.range(3).write.parquet(parquet)
    return World(spark, events, orders, plain, parquet, base / "checkpoints", base)


@pytest.fixture
def per_case(world: World, tmp_path: Path) -> Iterator[World]:
    yield World(**{**world.__dict__, "tmp": tmp_path})


def queue_state(path: str) -> tuple:
    """Version, rows, properties, subscriptions and history of a queue, read afresh."""
    table = DeltaTable(path)
    queue = Queue(path)
    subs = [(s.name, s.position, s.flow_stopped, s.flow_stopped_count, s.discarded_count)
            for s in queue.subscriptions.list()]
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    return table.version(), rows, dict(table.metadata().configuration), subs, len(queue.history.read())


def world_state(w: World) -> dict[str, Any]:
    return {
        "events": queue_state(w.events.path),
        "orders": queue_state(w.orders.path),
        "plain": (DeltaTable(w.plain).version(), DeltaTable(w.plain).to_pyarrow_table().num_rows),
        "parquet": sorted(p.name for p in Path(w.parquet).iterdir()),
        "tmp": sorted(str(p) for p in w.tmp.rglob("*")),
    }


def _set_props(spark: SparkSession, path: str, props: Mapping[str, str | None]) -> None:
    sets = {k: v for k, v in props.items() if v is not None}
    unsets = [k for k, v in props.items() if v is None]
    if sets:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in sets.items())
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({pairs})")
    if unsets:
        keys = ", ".join(f"'{k}'" for k in unsets)
        spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES IF EXISTS ({keys})")


@pytest.mark.parametrize("bad_input", CASES)
def test_bad_input_fails_clearly_and_changes_nothing(spark: SparkSession, per_case: World, bad_input: Case) -> None:
    w = per_case
    kept = DeltaTable(w.orders.path).metadata().configuration
    restore = {key: kept.get(key) for key in bad_input.props}
    try:
        for key, value in bad_input.conf.items():
            spark.conf.set(key, value)
        _set_props(spark, w.orders.path, bad_input.props)
        before = world_state(w)
        with pytest.raises(bad_input.error, match=bad_input.match):
            bad_input.action(w)
        after = world_state(w)
    finally:
        for key in bad_input.conf:
            spark.conf.unset(key)
        _set_props(spark, w.orders.path, restore)
    for what in before:
        assert after[what] == before[what], f"{what} changed"
