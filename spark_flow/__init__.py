"""spark-flow: producer flow control for Spark Structured Streaming.

Delta tables are queues; producers are held back when a queue's depth crosses its flow-stop
threshold and go on when it falls under the resume threshold, as message brokers do.
"""

from spark_flow.config import FlowConfig, resolve
from spark_flow.exceptions import ConfigurationError, SparkFlowError, UnknownKeyError
from spark_flow.session import get_spark
from spark_flow.state import FlowState, Thresholds

__all__ = [
    "ConfigurationError",
    "FlowConfig",
    "FlowState",
    "SparkFlowError",
    "Thresholds",
    "UnknownKeyError",
    "get_spark",
    "resolve",
]
