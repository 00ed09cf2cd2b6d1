"""The enqueue sink called directly as a foreachBatch function: exactly once, chunks, schema
checks, routing, sizes and the limit policies, on real Delta queues.

A direct call never sees a query stop, so a call held by a flow-stopped queue would block for
ever: every test here either ends with the queue flow-OFF, uses a policy that raises, or has a
consumer thread that acknowledges.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_flow.exceptions import (
    ConfigurationError,
)
from spark_flow.spark.sink import QueueSink

# A held direct call never returns: fail instead of hanging.
pytestmark = pytest.mark.timeout(120)


def test_unknown_sink_option_names_the_closest_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="Did you mean 'capacity'"):
        QueueSink(str(tmp_path / "q"), options={"capacty": 10}, app_id="p")
