"""``spark-flow doctor``'s lines from what failed, without Spark: the errors as Spark raises
them on a cluster (a YARN container's paths in every traceback frame)."""

from __future__ import annotations

from spark_flow.ops.doctor import executors_failed
from spark_flow.store.access import namenode_error

#: A YARN container's directory, as the node manager names it: in each frame of the traceback.
CONTAINER = ("/tmp/hadoop-root/nm-local-dir/usercache/root/appcache/application_1764290000000_0006/"
             "container_1764290000000_0006_01_000002")
#: What ``collect()`` raised for doctor's probe, its executor's Python without spark_flow (the
#: shape of the issue's run: Spark's lines, then the Python worker's traceback, its last line
#: the error).
WORKER_FAILED = (
    "An exception was thrown from the Python worker. Please see the stack trace below.\n"
    "Traceback (most recent call last):\n"
    + "".join(f'  File "{CONTAINER}/pyspark.zip/pyspark/{module}.py", line {line}, in {function}\n'
              f"    {code}\n" for module, line, function, code in (
                  ("worker", 3317, "main", "eval_type, func, profiler, deserializer, serializer = read_udfs(...)"),
                  ("worker", 2890, "read_udfs", "udfs.append(read_single_udf(...))"),
                  ("worker", 1402, "read_single_udf", "f, return_type = read_command(pickleSer, infile)"),
                  ("worker_util", 64, "read_command", "command = serializer._read_with_length(file)"),
                  ("serializers", 174, "_read_with_length", "return self.loads(obj)"),
                  ("serializers", 472, "loads", "return cloudpickle.loads(obj, encoding=encoding)")))
    + "ModuleNotFoundError: No module named 'spark_flow'\n\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:651)\n"
)


def test_the_executors_missing_module_is_named_with_its_fix_past_the_container_paths() -> None:
    """The module the executors' Python lacks is named from the whole error, however long the
    container's paths make it, with the fix: not a cut traceback and "see the executors' logs"."""
    assert WORKER_FAILED.index("No module named") > 400
    check = executors_failed(WORKER_FAILED, "/opt/venv/bin/python")
    assert not check.ok and check.detail == "No module named 'spark_flow' in the executors' Python (/opt/venv/bin/python)"
    assert check.fix.startswith("install spark-flow (with deltalake and pyarrow) in that Python on every node")
    other = executors_failed("An exception was thrown from the Python worker ... MemoryError", "python3")
    assert other.fix == "see the executors' logs" and "MemoryError" in other.detail


def test_an_unreachable_namenode_is_named_by_the_address_the_url_gave() -> None:
    """On hdfs:// the namenode is the URL's: the line names the address tried, and says so,
    rather than storage settings that do not set it; another failure is not taken for it."""
    refused = namenode_error("hdfs://nn.example:8021/flow/home", "IO error occurred while communicating with HDFS: "
                                                                  "Connection refused (os error 111)")
    assert refused is not None
    assert refused.missing == "cannot connect to the namenode at nn.example:8021 (the location's hdfs:// URL names it)"
    assert "spark.flow.storage" not in refused.fix and "spark.hadoop.fs" not in refused.fix
    assert namenode_error("hdfs://nn.example:8021/flow/home", "Permission denied: user=bob") is None
