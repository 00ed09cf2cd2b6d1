"""Exceptions raised by spark-flow.

Every error names what was wrong (the key, column, queue or subscription), the value seen and
what is allowed, so a failed job's log says how to fix it.
"""

from __future__ import annotations

from typing import Any


class SparkFlowError(Exception):
    """Thrown when spark-flow cannot do what was asked; the base of every spark-flow error."""


class ConfigurationError(SparkFlowError, ValueError):
    """Thrown when a configuration key or value is not valid, before any data moves."""

    def __init__(self, key: str, value: Any, allowed: str, hint: str = "") -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        message = f"{key}={value!r} is not valid: allowed is {allowed}"
        super().__init__(f"{message}. {hint}" if hint else message)


class UnknownKeyError(ConfigurationError):
    """Thrown when a `spark.flow.*` key, `flow.*` property or option is not one spark-flow knows."""

    def __init__(self, key: str, value: Any, closest: str | None) -> None:
        hint = f"Did you mean {closest!r}?" if closest else ""
        super().__init__(key, value, "a known spark-flow key", hint)
        self.closest = closest
