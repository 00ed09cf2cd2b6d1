"""The Spark SQL statements of the engine's writes of state
(:class:`~spark_flow.store.engine.EngineTable`): a :class:`~spark_flow.store.table.Merge` as
``MERGE INTO``, or, for one source row that only updates, as ``UPDATE`` with the row's values
written into the statement; and the literals they take.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from spark_flow.store.table import ALL, Merge


def _assignments(assigned: Mapping[str, str]) -> str:
    return ", ".join(f"`{column}` = {expression}" for column, expression in assigned.items())


def merge_sql(target: str, merge: Merge, *, merge_schema: bool = False) -> str:
    """A :class:`Merge` as Spark SQL's ``MERGE INTO`` of the source ``{s}``."""
    clauses = []
    if merge.update is not None:
        when = f" AND ({merge.update_when})" if merge.update_when else ""
        action = "UPDATE SET *" if merge.update == ALL else f"UPDATE SET {_assignments(merge.update)}"
        clauses.append(f"WHEN MATCHED{when} THEN {action}")
    if merge.insert == ALL:
        clauses.append("WHEN NOT MATCHED THEN INSERT *")
    elif merge.insert is not None:
        names = ", ".join(f"`{column}`" for column in merge.insert)
        clauses.append(f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({', '.join(merge.insert.values())})")
    evolution = " WITH SCHEMA EVOLUTION" if merge_schema else ""
    return f"MERGE{evolution} INTO {target} t USING {{s}} s ON {merge.on} " + " ".join(clauses)


#: A reference to a column of a MERGE's source, or a quoted literal or name to leave as it is.
_SOURCE_COLUMN = re.compile(r"'(?:[^'\\]|\\.)*'|`(?:[^`]|``)*`|\bs\.`?(\w+)`?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def spark_sql_string(text: str) -> str:
    """A string literal in a Spark SQL statement: a quote and a backslash escaped with a backslash."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _literal(value: Any) -> str | None:
    """``value`` (one of :func:`~spark_flow.store.tables.one_row`'s) as a Spark SQL literal;
    None for a value of another kind."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L"
    if isinstance(value, str):
        return spark_sql_string(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return f"timestamp_micros({(value - _EPOCH) // timedelta(microseconds=1)})"
    return None


def update_sql(target: str, merge: Merge, row: Mapping[str, Any]) -> str | None:
    """A :class:`Merge` of the one source ``row`` that only updates, as ``UPDATE`` with the row's
    values in place of its columns: Delta runs it in 7 Spark jobs where a MERGE of the same
    row (its source materialized first) takes 10, and a queue's state is written so, a row at a
    time (an acknowledgement, a transition, a redelivery's progress); a row that does not match
    costs 2. None where that cannot be said so (an insert, a whole-row update, a value of
    another kind)."""
    if merge.insert is not None or merge.update is None or merge.update == ALL:
        return None
    literals: dict[str, str] = {}
    for column, value in row.items():
        literal = _literal(value)
        if literal is None:
            return None
        literals[column] = literal

    def inline(expression: str) -> str:
        return _SOURCE_COLUMN.sub(lambda m: m.group(0) if m.group(1) is None else literals[m.group(1)], expression)

    where = f"({inline(merge.on)})" + (f" AND ({inline(merge.update_when)})" if merge.update_when else "")
    return f"UPDATE {target} t SET {_assignments({c: inline(e) for c, e in merge.update.items()})} WHERE {where}"
