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

import pytest

pytestmark = pytest.mark.timeout(120)


# --- the table ----------------------------------------------------------------------------

WHOLE = "a whole number >= 0"
SIZE = "bytes as a whole number >= 0, or with a unit: 8k, 10 MB"
PERCENT = "a percentage from 0 to 100"
DURATION = "a duration such as 500ms, 5s, 2min, 1h (a plain number is milliseconds)"
POLICIES = "one of flow, ring, ring-strict"
ON_FULL = "one of hold, reject, reject-after"

CONF_VALUES = [
    ("stopCount", "abc", WHOLE), ("stopCount", "-5", WHOLE), ("stopCount", "1.5", WHOLE),
    ("resumeCount", "x", WHOLE), ("maxCount", "ten", WHOLE),
    ("stopSize", "10 parsecs", SIZE), ("stopSize", "0.3b", "a whole number of bytes"), ("resumeSize", "lots", SIZE),
    ("maxSize", "-1k", SIZE),
    ("defaultStopThreshold", "101", PERCENT), ("defaultResumeThreshold", "-1", PERCENT),
    ("policy", "drop-newest", POLICIES), ("onFull", "wait", ON_FULL), ("rejectTimeout", "soon", DURATION),
    ("capacity", "0", "a whole number >= 1"), ("pollInterval", "0s", DURATION + ", above 0"),
    ("producerFlowControl", "maybe", "true or false"), ("producersStopped", "sometimes", "true or false"),
    ("stallTimeout", "forever", DURATION), ("stalledConsumerPolicy", "ignore", "one of flag, skip"),
    ("stopAge", "-5s", DURATION), ("resumeAge", "a while", DURATION),
    ("homeStopCount", "-1", WHOLE), ("homeResumeCount", "many", WHOLE), ("homeStopSize", "big", SIZE),
    ("homeResumeSize", "-1k", SIZE), ("msgPublishRate", "fast", WHOLE), ("bytePublishRate", "1 parsec/s", SIZE),
    ("messageTtl", "soon", DURATION), ("maxDeliveries", "-1", WHOLE),
    ("deadLetterQueue", " ", "a queue: a path or a catalog table name"), ("maxDeadLettersPerBatch", "0", "a whole number >= 1"),
]


def test_every_key_with_a_parser_that_can_refuse_has_a_bad_conf_case() -> None:
    """The table covers every spark.flow.* key (``home`` takes any location)."""
    from spark_flow.rules.keys import KEYS

    covered = {key for key, _value, _allowed in CONF_VALUES}
    assert set(KEYS) - covered == {"home"}
