"""spark-flow: producer flow control for Spark Structured Streaming.

Delta tables are queues; producers are held back when a queue's depth crosses its flow-stop
threshold and go on when it falls under the resume threshold, as message brokers do.
"""

from spark_flow.controller.query import start_controller, stop_between_batches
from spark_flow.exceptions import (
    ConfigurationError,
    DeadLetterLimitError,
    DeadLetterQueueError,
    FlowControlError,
    HistoryNotFoundError,
    HoldInterruptedError,
    PositionOutOfRangeError,
    ProducerSettingError,
    QueueDeleteRefusedError,
    QueueFullError,
    QueueFullTimeoutError,
    QueueNotFoundError,
    QueueSettingError,
    QueueWriterConflictError,
    SchemaMismatchError,
    SparkFlowError,
    StorageAccessError,
    SubscriptionInUseError,
    SubscriptionNotFoundError,
    UnknownKeyError,
)
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.subscriptions import Subscription
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import Thresholds
from spark_flow.rules.settings import ProducerSettings, QueueSettings
from spark_flow.rules.storage_options import storage_options
from spark_flow.spark.dead_letters import DeadLetters
from spark_flow.spark.declare import declare, purge_acknowledged
from spark_flow.spark.listener import FlowProgress, FlowProgressListener
from spark_flow.spark.session import get_spark
from spark_flow.spark.sink import QueueSink, enqueue_stream
from spark_flow.spark.source import FlowQueueDataSource, read_queue

__all__ = [
    "ConfigurationError",
    "DeadLetterLimitError",
    "DeadLetterQueueError",
    "DeadLetters",
    "Depth",
    "FlowAdmin",
    "FlowControlError",
    "FlowProgress",
    "FlowProgressListener",
    "FlowQueueDataSource",
    "HistoryNotFoundError",
    "HoldInterruptedError",
    "PositionOutOfRangeError",
    "ProducerSettingError",
    "ProducerSettings",
    "Queue",
    "QueueDeleteRefusedError",
    "QueueFullError",
    "QueueFullTimeoutError",
    "QueueNotFoundError",
    "QueueSettingError",
    "QueueSettings",
    "QueueSink",
    "QueueWriterConflictError",
    "SchemaMismatchError",
    "SparkFlowError",
    "StorageAccessError",
    "Subscription",
    "SubscriptionInUseError",
    "SubscriptionNotFoundError",
    "Thresholds",
    "UnknownKeyError",
    "declare",
    "enqueue_stream",
    "get_spark",
    "open_queue",
    "purge_acknowledged",
    "read_queue",
    "start_controller",
    "stop_between_batches",
    "storage_options",
]
