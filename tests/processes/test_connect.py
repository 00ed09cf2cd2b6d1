"""spark-flow as a Spark Connect client (Databricks serverless and standard access mode): what
Connect cannot give is asked for, before anything is written. The notebook's whole run under
Connect is in test_notebook."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_flow import open_queue

pytestmark = pytest.mark.processes

CLIENT = textwrap.dedent("""
    import sys
    from spark_flow import QueueSink, declare, get_spark
    from spark_flow.spark.session import exit_process

    base = sys.argv[1]
    spark = get_spark()
    declare(spark, f"{base}/q", "id BIGINT", settings={"stopCount": 100})
    rows = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load().selectExpr("value AS id")
    other = rows.writeStream.format("noop").option("checkpointLocation", f"{base}/c1").start()
    sink = QueueSink(f"{base}/q", options={"capacity": 10})  # no query_name: two queries run
    producer = (rows.writeStream.foreachBatch(sink).queryName("p").option("checkpointLocation", f"{base}/c2")
                .start())
    try:
        producer.awaitTermination(300)
    except Exception as error:  # the query's failure, raised on the client
        print("EXCEPTION", " ".join(str(error).split()))
    finally:
        other.stop()
    exit_process(0)
""")


def test_a_producer_that_cannot_tell_its_query_fails_before_writing(tmp_path: Path,
                                                                   connect_session: Callable[[], str]) -> None:
    """Connect tells a foreachBatch function nothing of its query: with two queries running and
    no ``query_name``, the sink's first batch fails naming ``query_name`` and the queries it
    could be, and the queue gets no message."""
    env = {**os.environ, "SPARK_REMOTE": connect_session()}
    result = subprocess.run([sys.executable, "-c", CLIENT, str(tmp_path)], env=env, capture_output=True, text=True,
                            timeout=400, check=False)
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    error = next(line for line in result.stdout.splitlines() if line.startswith("EXCEPTION"))
    assert "query_name=None is not valid" in error and "'p'" in error and "QueueSink(query_name=" in error, error
    assert open_queue(str(tmp_path / "q")).depth().count == 0


LISTENING_CLIENT = textwrap.dedent("""
    import sys
    from spark_flow import FlowProgressListener, get_spark

    spark = get_spark()
    listener = FlowProgressListener(queues=[])
    spark.streams.addListener(listener)
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    query.processAllAvailable()
    query.stop()
    print("end of script", flush=True)
""")


def test_a_client_that_added_a_flow_progress_listener_exits_at_its_script_s_end(spark_connect: str) -> None:
    """PySpark's Connect listener thread is not a daemon and waits on the server for events: a
    client that added a listener and never removed it would wait at its end forever. spark-flow
    closes its listener when the script ends (``listener.close()`` does it at once)."""
    env = {**os.environ, "SPARK_REMOTE": spark_connect}
    result = subprocess.run([sys.executable, "-c", LISTENING_CLIENT], env=env, capture_output=True, text=True,
                            timeout=180, check=False)
    assert (result.returncode, result.stdout) == (0, "end of script\n"), result.stderr[-3000:]
    assert "Warning" not in result.stderr, result.stderr[-3000:]



ENDING_CLIENT = textwrap.dedent("""
    import sys
    import threading
    from spark_flow import FlowProgressListener, get_spark
    from spark_flow.spark.session import exit_process


    class Lingering:
        \"\"\"stdout whose flush (exit_process flushes after the session's stop) lets PySpark's
        listener thread run to its end first, as a busy machine's scheduler may.\"\"\"

        def __getattr__(self, name):
            return getattr(sys.__stdout__, name)

        def flush(self):
            for thread in threading.enumerate():
                if thread.name.endswith("(_query_event_handler)"):
                    thread.join(60)
            sys.__stdout__.flush()


    spark = get_spark()
    spark.streams.addListener(FlowProgressListener(queues=[]))
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    query.processAllAvailable()
    query.stop()
    print("end of job", flush=True)
    sys.stdout = Lingering()
    exit_process(0)
""")


HOLDING_CLIENT = textwrap.dedent("""
    import threading
    from spark_flow import FlowProgressListener, get_spark
    from spark_flow.spark.session import close_before_stop, exit_process

    holding, ending = threading.Event(), threading.Event()


    class Holding(FlowProgressListener):
        \"\"\"Takes its time over its first progress event (a listener writing to a slow store),
        PySpark's listener bus lock held, until the job ends: the query's next events wait.\"\"\"

        def onQueryProgress(self, event):
            super().onQueryProgress(event)
            if not holding.is_set():
                holding.set()
                ending.wait(60)


    spark = get_spark()
    close_before_stop(ending.set)  # before the listener's own close
    spark.streams.addListener(Holding(queues=[]))
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    holding.wait(60)
    first = query.lastProgress["batchId"]
    while query.lastProgress["batchId"] < first + 2:  # two more events sent while the listener holds
        query.awaitTermination(0.1)
    print("end of job", flush=True)
    exit_process(0)
""")


def test_a_script_that_ends_through_exit_process_with_a_listener_added_ends_at_once_and_prints_no_warning(
        spark_connect: str) -> None:
    """Jobs end with :func:`exit_process`, which closes the listeners, then stops the session.
    Under Connect, a listener still added saw its event stream cut and PySpark warned
    ("StreamingQueryListenerBus Handler thread received exception") whenever the channel closed
    before the server ended the stream and the thread ran before the process left (a CI run's
    consumer job, which did nothing wrong; on main a third of the runs here warned, so three at
    once). And PySpark's own removal of the last listener waits for that thread while holding the
    lock the thread needs to deliver an event (SPARK-59623): an event arriving meanwhile (a
    query's termination just after its stop) hung the job for good (a CI run; the holding client
    hung in 4 runs of 4)."""
    env = {**os.environ, "SPARK_REMOTE": spark_connect}
    runs = [subprocess.Popen([sys.executable, "-c", client], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for client in [*[ENDING_CLIENT] * 3, HOLDING_CLIENT]]
    for run in runs:
        try:
            stdout, stderr = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            stdout, stderr = run.communicate()
        assert (run.returncode, stdout) == (0, "end of job\n"), stderr[-3000:]
        assert "Warning" not in stderr, stderr[-3000:]
