"""spark-flow: producer flow control for Spark Structured Streaming.

Delta tables are queues; producers are held back when a queue's depth crosses its flow-stop
threshold and go on when it falls under the resume threshold, as message brokers do.
"""

from spark_flow.config import ProducerSettings, QueueSettings
from spark_flow.exceptions import (
    ConfigurationError,
    FlowControlError,
    HoldInterruptedError,
    QueueFullError,
    QueueFullTimeoutError,
    QueueNotFoundError,
    QueueSettingError,
    SchemaMismatchError,
    SparkFlowError,
    SubscriptionNotFoundError,
    UnknownKeyError,
)
from spark_flow.gate import Gate, GateStatus
from spark_flow.ledger import Depth
from spark_flow.queue import Queue, declare, open_queue, purge_acknowledged
from spark_flow.session import get_spark
from spark_flow.sink import QueueSink, enqueue_stream
from spark_flow.source import FlowQueueDataSource, read_queue
from spark_flow.state import FlowState, Thresholds

__all__ = [
    "ConfigurationError",
    "Depth",
    "FlowControlError",
    "FlowQueueDataSource",
    "FlowState",
    "Gate",
    "GateStatus",
    "HoldInterruptedError",
    "ProducerSettings",
    "Queue",
    "QueueFullError",
    "QueueFullTimeoutError",
    "QueueNotFoundError",
    "QueueSettingError",
    "QueueSettings",
    "QueueSink",
    "SchemaMismatchError",
    "SparkFlowError",
    "SubscriptionNotFoundError",
    "Thresholds",
    "UnknownKeyError",
    "declare",
    "enqueue_stream",
    "get_spark",
    "open_queue",
    "purge_acknowledged",
    "read_queue",
]
