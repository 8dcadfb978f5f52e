"""What every SQL repository shares: its connection, records read from and written to rows
whose columns are named as their fields, and the statements over the rows of one column's
value.

The names keep their leading underscore: they are for this package's repositories only.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from sqlalchemy import Delete, Executable, Select, Table, bindparam, delete, insert, select, update

from ficc.adapters.sql.database import HotStatement, SqlConnection, execute_hot
from ficc.adapters.sql.tables import StoredTime
from ficc.base.times import parse_time

_R = TypeVar("_R")


class _Keyed(Protocol):
    @property
    def id(self) -> str: ...


_K = TypeVar("_K", bound=_Keyed)


def _time(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


@functools.cache
def _times(table: Table) -> frozenset[str]:
    """The names of ``table``'s time columns, whose text a record reads as a datetime."""
    return frozenset(column.name for column in table.c if isinstance(column.type, StoredTime))


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(kind: type[Any]) -> tuple[str, ...]:
    """``kind``'s fields, read once per class: some records are read on every request, and
    ``dataclasses.fields`` walks the class each time."""
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(kind) if f.init)
    return names


def _record(kind: type[_R], table: Table, row: Any, **read: Any) -> _R:
    """A ``kind`` (a dataclass) of ``table``'s row, each field the column of its name, a time
    parsed (a JSON column's value is already a new dict or list); ``read``: the fields the
    row holds otherwise (a set as a list, a spec as JSON) or not at all.

    One mapping, not one spelt out field by field in every repository: a field that has no
    column and is not in ``read`` fails at once.
    """
    times = _times(table)
    return kind(
        **{
            name: _time(getattr(row, name)) if name in times else getattr(row, name)
            for name in _field_names(kind)
            if name not in read
        },
        **read,
    )


def _row_values(record: object, table: Table, **written: Any) -> dict[str, Any]:
    """The values of ``table``'s columns but its key, each the field of ``record`` of its
    name; ``written``: the columns stored otherwise (a set as a sorted list, a spec as JSON).

    A time goes as the datetime it is: the column writes it (``tables.StoredTime``).
    """
    values = {
        column.name: getattr(record, column.name)
        for column in table.c
        if not column.primary_key and column.name not in written
    }
    return values | written


@functools.cache
def _select_where(table: Table, column: str) -> HotStatement:
    """``SELECT * FROM table WHERE column = :value``, built and rendered once.

    A statement object built anew on every call is compiled from its cache key, which
    SQLAlchemy derives by walking the whole expression (about 0.1 ms); a kept one skips that,
    and on SQLite goes to the driver straight (these look-ups run on every request).
    """
    return HotStatement(select(table).where(table.c[column] == bindparam("value")))


@functools.cache
def _delete_statement(table: Table, column: str) -> Delete:
    """``DELETE FROM table WHERE column = :value``, built once (as :func:`_select_where`)."""
    return delete(table).where(table.c[column] == bindparam("value"))


@functools.cache
def _lock_statement(table: Table, column: str) -> Select[Any]:
    """``SELECT column FROM table WHERE column = :value FOR UPDATE``, built once."""
    return select(table.c[column]).where(table.c[column] == bindparam("value")).with_for_update()


class _Repository:
    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    async def _first_where(self, table: Table, column: str, value: object) -> Any:
        """The first row whose ``column`` equals ``value``, or None."""
        rows = await execute_hot(self._c, _select_where(table, column), {"value": value})
        return rows[0] if rows else None

    async def _rows_where(self, table: Table, column: str, value: object) -> Sequence[Any]:
        """Every row whose ``column`` equals ``value``."""
        return await execute_hot(self._c, _select_where(table, column), {"value": value})

    async def _update_where(
        self, table: Table, column: str, value: object, values: Mapping[str, Any]
    ) -> int:
        """Set ``values`` on the rows whose ``column`` equals ``value``; how many there were
        (built per call: the columns set vary)."""
        statement = update(table).where(table.c[column] == value).values(values)
        return int((await self._c.execute(statement)).rowcount)

    async def _delete_where(self, table: Table, column: str, value: object) -> None:
        """Delete the rows whose ``column`` equals ``value``."""
        await self._c.execute(_delete_statement(table, column), {"value": value})

    async def _lock_where(self, table: Table, column: str, value: object) -> None:
        """Hold the rows whose ``column`` equals ``value`` until the transaction ends: ``SELECT
        ... FOR UPDATE`` on PostgreSQL; SQLite has no row locks (and one writer)."""
        await self._c.execute(_lock_statement(table, column), {"value": value})


class _Records(_Repository, abc.ABC, Generic[_K]):
    """The repository of one table's records, each row keyed by its record's ``id``: a
    subclass names the table (``_table``) and reads a row (``_read``); a record is written as
    ``_row_values`` has it unless the subclass's ``_values`` says otherwise."""

    _table: ClassVar[Table]

    @abc.abstractmethod
    def _read(self, row: object) -> _K:
        """The record of one of the table's rows."""

    def _values(self, record: _K) -> dict[str, object]:
        return _row_values(record, self._table)

    async def _one_where(self, column: str, value: object) -> _K | None:
        """The record of the first row whose ``column`` equals ``value``, or None."""
        row = await self._first_where(self._table, column, value)
        return None if row is None else self._read(row)

    async def _all(self, query: Executable) -> list[_K]:
        """The records of the rows ``query`` selects, in its order."""
        return [self._read(row) for row in await self._c.execute(query)]

    async def add(self, record: _K) -> None:
        await self._c.execute(insert(self._table).values(id=record.id, **self._values(record)))

    async def get(self, record_id: str) -> _K | None:
        return await self._one_where("id", record_id)


class _EditableRecords(_Records[_K]):
    """Records (as :class:`_Records`) that are also rewritten and deleted whole, by ``id``."""

    async def update(self, record: _K) -> None:
        await self._update_where(self._table, "id", record.id, self._values(record))

    async def delete(self, record_id: str) -> None:
        await self._delete_where(self._table, "id", record_id)
