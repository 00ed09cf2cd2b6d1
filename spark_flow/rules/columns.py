"""A record's columns, declared once: the Spark DDL of a query's schema is derived here, the
Arrow schema of a table by the store (:func:`spark_flow.store.table.arrow_fields`), so a column
added to a record is added everywhere it is written."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["string", "bigint", "double", "boolean", "timestamp", "binary"]


@dataclass(frozen=True)
class Column:
    """One column: its name, its type (as Spark SQL names it) and whether it may be null."""

    name: str
    kind: Kind
    nullable: bool = True


def ddl(columns: Iterable[Column]) -> str:
    """The columns as a Spark DDL schema string (``name BIGINT, ...``)."""
    return ", ".join(f"{column.name} {column.kind.upper()}" for column in columns)


def names(columns: Iterable[Column]) -> list[str]:
    return [column.name for column in columns]
