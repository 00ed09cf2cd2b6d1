"""Values as users write them: counts, sizes, durations, percentages, booleans and choices.

One parser per kind of value, for every place a user gives one: Spark conf keys, table
properties, run-time settings, source options, the CLI and the jobs' flags. So a bare number
means the same everywhere: bytes for a size, milliseconds for a duration. Each parser raises :class:`~spark_flow.exceptions.ConfigurationError` naming the key, the value
and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from spark_flow.exceptions import ConfigurationError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.I)
_SIZE_UNITS = {"b": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|millis|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)?\s*$", re.I
)
#: How a duration may be written, for messages.
DURATIONS = "a duration such as 500ms, 5s, 2min, 1h (a plain number is milliseconds)"


def parse_count(key: str, value: Any, minimum: int = 0) -> int:
    """A message count: a whole number of at least ``minimum``, as int or digits."""
    text = str(value).strip()
    if isinstance(value, (bool, float)) or not re.fullmatch(r"\d+", text) or int(text) < minimum:
        raise ConfigurationError(key, value, f"a whole number >= {minimum}")
    return int(text)


def parse_size(key: str, value: Any, minimum: int = 0) -> int:
    """A size in bytes of at least ``minimum``: plain bytes or a number with a unit (``8k``,
    ``10 MB``, Spark's ``10m``; 1k = 1024)."""
    match = _SIZE.match(str(value)) if not isinstance(value, (bool, float)) else None
    allowed = f"bytes as a whole number >= {minimum}, or with a unit: 8k, 10 MB"
    if not match:
        raise ConfigurationError(key, value, allowed)
    size = Fraction(match.group(1)) * 1024 ** _SIZE_UNITS[(match.group(2) or "b")[0].lower()]
    if size.denominator != 1:
        raise ConfigurationError(key, value, "a whole number of bytes")
    if size < minimum:
        raise ConfigurationError(key, value, allowed)
    return int(size)


def parse_duration(key: str, value: Any, minimum: float = 0.0) -> float:
    """A duration in seconds, from ``500ms``, ``5s``, ``2 min``, ``1 second``, ``1h`` or a
    plain number of milliseconds; above 0 when ``minimum`` is."""
    match = _DURATION.match(str(value)) if not isinstance(value, bool) else None
    seconds = None
    if match:
        seconds = float(match.group(1)) * _seconds_per((match.group(2) or "ms").lower())
    if seconds is None or seconds < minimum or (minimum > 0 and seconds == 0):
        raise ConfigurationError(key, value, f"{DURATIONS}, above 0" if minimum > 0 else DURATIONS)
    return seconds


def _seconds_per(unit: str) -> float:
    if unit == "ms" or unit.startswith("milli"):
        return 0.001
    return {"s": 1.0, "m": 60.0, "h": 3600.0}[unit[0]]


def parse_percent(key: str, value: Any) -> Fraction:
    """A percentage of a queue's maximum, 0 to 100."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"\d+(\.\d+)?", text) or Fraction(text) > 100:
        raise ConfigurationError(key, value, "a percentage from 0 to 100")
    return Fraction(text)


def parse_bool(key: str, value: Any) -> bool:
    """A boolean, as Spark conf writes it: true or false."""
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(key, value, "true or false")
    return text == "true"


def parse_choice(key: str, value: Any, choices: Sequence[str], hint: str = "") -> str:
    """One of ``choices``, case-insensitive; ``hint`` says what the value may have been meant as."""
    text = str(value).strip().lower()
    if text not in choices:
        raise ConfigurationError(key, value, "one of " + ", ".join(choices), hint)
    return text
