"""The table of bad configurations (tests/support/bad_values.py) covers every ``spark.flow.*`` key;
the cases themselves run against a real session: tests/session/test_bad_input.py."""

from __future__ import annotations

import pytest
from support.bad_values import CONF_VALUES

pytestmark = pytest.mark.timeout(120)


def test_every_key_with_a_parser_that_can_refuse_has_a_bad_conf_case() -> None:
    """The table covers every spark.flow.* key (``home`` takes any location)."""
    from spark_flow.rules.keys import KEYS

    covered = {key for key, _value, _allowed in CONF_VALUES}
    assert set(KEYS) - covered == {"home"}
