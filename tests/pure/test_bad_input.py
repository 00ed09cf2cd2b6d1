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
from support.bad_values import CONF_VALUES

pytestmark = pytest.mark.timeout(120)


# --- the table ----------------------------------------------------------------------------



def test_every_key_with_a_parser_that_can_refuse_has_a_bad_conf_case() -> None:
    """The table covers every spark.flow.* key (``home`` takes any location)."""
    from spark_flow.rules.keys import KEYS

    covered = {key for key, _value, _allowed in CONF_VALUES}
    assert set(KEYS) - covered == {"home"}
