"""What every SQL repository shares: its connection, stored times read and written, and
selects by one column built once.

The names keep their leading underscore: they are for this package's repositories only.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Table, bindparam, select

from ficc.adapters.sql.database import SqlConnection
from ficc.base.times import format_time, parse_time


def _time(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


def _req_time(value: str) -> datetime:
    return parse_time(value)


def _opt(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


@functools.cache
def _select_where(table: Table, column: str) -> Select[Any]:
    """``SELECT * FROM table WHERE column = :value``, built once.

    A statement object built anew on every call is compiled from its cache key, which
    SQLAlchemy derives by walking the whole expression (about 0.1 ms); a kept one skips that.
    """
    return select(table).where(table.c[column] == bindparam("value"))


class _Repository:
    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    async def _first_where(self, table: Table, column: str, value: object) -> Any:
        """The first row whose ``column`` equals ``value``, or None."""
        return (await self._c.execute(_select_where(table, column), {"value": value})).first()

    async def _rows_where(self, table: Table, column: str, value: object) -> Sequence[Any]:
        """Every row whose ``column`` equals ``value``."""
        return (await self._c.execute(_select_where(table, column), {"value": value})).all()
