"""Metering's storage: token reservations on a grant's row, and usage records.

A reservation is one conditional UPDATE of the grant's row (the check and the charge in one
statement): on PostgreSQL the row lock it takes orders concurrent reservations, and the
second one's condition is evaluated again on the row the first one left (READ COMMITTED
re-checks an updated row), so two requests can never both take the last tokens; SQLite has
one writer.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import ColumnElement, Table, bindparam, func, select

from ficc.adapters.sql import metering_tables as m
from ficc.adapters.sql import signed_records as signed
from ficc.adapters.sql import tables as t
from ficc.adapters.sql.budgets import BudgetMethods, BudgetRow
from ficc.adapters.sql.database import HotStatement, SqlConnection, execute_hot
from ficc.adapters.sql.repository import _record
from ficc.domain.metering import (
    HOUR_CHARS,
    GrantStanding,
    UsageQuery,
    UsageRecord,
    bucketed,
    empty_totals,
)

_GRANTS = t.grants.c
_RECORDS = m.usage_records.c

_BUDGET: Final = BudgetRow(t.grants, _GRANTS.id)


_STANDING_COLUMNS: Final = (
    _GRANTS.requests_used,
    _GRANTS.transfer_bytes_used,
    _GRANTS.prompt_tokens_used,
    _GRANTS.completion_tokens_used,
    _GRANTS.tokens_reserved,
)
"""A grant's standing (``GrantStanding``): its counters."""
_STANDING: Final = select(*_STANDING_COLUMNS).where(_GRANTS.id == bindparam("grant"))
_SETTLE_STANDING: Final = HotStatement(_BUDGET.settle_statement.returning(*_STANDING_COLUMNS))
"""The settlement, answering the row it leaves: the told counts need it, and reading the row
again would be one more statement on every request (SQLite 3.35+ and PostgreSQL return it)."""

RECORD_COLUMNS: Final = tuple(
    column
    for column in m.usage_records.c
    if column.name not in ("receipt_seq", "receipt_digest", "receipt")
)
"""A usage record's columns: what its queries read (a grantor's receipt in the same row is
read by ``usage_receipts``)."""

_NO_RECEIPT: Final = {"receipt_seq": None, "receipt_digest": None, "receipt": None}
"""A record without a receipt in its row (the requester keeps each in ``usage_receipts``)."""


class SqlUsage(BudgetMethods):
    """Implements ``ficc.services.ports.UsageRepository``: its budget is the grant's row."""

    _budget = _BUDGET

    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    async def settle_and_stand(
        self, grant_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> GrantStanding | None:
        rows = await execute_hot(
            self._c,
            _SETTLE_STANDING,
            _BUDGET.settlement(grant_id, reserved, prompt_tokens, completion_tokens),
        )
        return _standing_of(rows[0] if rows else None)

    async def standing(self, grant_id: str) -> GrantStanding | None:
        return _standing_of((await self._c.execute(_STANDING, {"grant": grant_id})).first())

    async def add(self, record: UsageRecord) -> None:
        # The signed records' statement, built and rendered once: every federated request
        # writes one record on each side.
        await execute_hot(self._c, signed.ADD, record_values(record) | _NO_RECEIPT)

    async def of_requests(
        self, grant_id: str, side: str, requests: list[str]
    ) -> dict[str, UsageRecord]:
        if not requests:
            return {}
        query = (
            select(*RECORD_COLUMNS)
            .where(*of_grant_requests(m.usage_records, grant_id, side, requests))
            .order_by(_RECORDS.seq.desc())
        )
        return {row.request_id: record_of(row) for row in await self._c.execute(query)}

    async def page(
        self, query: UsageQuery, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]:
        return await page_of(self._c, _where(query), after, limit)

    async def totals(self, query: UsageQuery) -> dict[str, Any]:
        return await totals_of(self._c, _where(query))


def _where(query: UsageQuery) -> list[ColumnElement[bool]]:
    """:meth:`UsageQuery.holds` in SQL."""
    where = [_RECORDS.grant_id == query.grant_id, _RECORDS.side == query.side]
    if query.since is not None:
        where.append(_RECORDS.started_at >= query.since)
    if query.until is not None:
        where.append(_RECORDS.started_at < query.until)
    return where


def of_grant_requests(
    table: Table, grant_id: str, side: str, requests: list[str]
) -> list[ColumnElement[bool]]:
    """The rows of ``requests`` on one side of a grant, in ``table``: usage records or
    receipts, both keyed by grant, side and request."""
    return [
        table.c.grant_id == grant_id,
        table.c.side == side,
        table.c.request_id.in_(sorted(set(requests))),
    ]


async def page_of(
    connection: SqlConnection, where: list[ColumnElement[bool]], after: int | None, limit: int
) -> list[UsageRecord]:
    """The records ``where`` selects by seq, those after ``after`` where given: a page of a
    grant's records or a token's."""
    query = select(*RECORD_COLUMNS).where(*where)
    if after is not None:
        query = query.where(_RECORDS.seq > after)
    rows = await connection.execute(query.order_by(_RECORDS.seq).limit(limit))
    return [record_of(row) for row in rows]


_HOUR: Final = func.substr(_RECORDS.started_at, 1, HOUR_CHARS).label("bucket")
_SUMS: Final = (
    func.count().label("requests"),
    *(
        func.coalesce(func.sum(_RECORDS[name]), 0).label(name)
        for name in ("prompt_tokens", "completion_tokens", "request_bytes", "response_bytes")
    ),
)


async def totals_of(connection: SqlConnection, where: list[ColumnElement[bool]]) -> dict[str, Any]:
    """The sums over the records ``where`` selects, whole and per hour and per day (UTC)."""
    query = select(_HOUR, *_SUMS).where(*where).group_by(_HOUR).order_by(_HOUR)
    rows = (await connection.execute(query)).all()
    return bucketed([(row.bucket, _sums_of(row)) for row in rows])


def _standing_of(row: Any) -> GrantStanding | None:
    return None if row is None else _record(GrantStanding, t.grants, row)


def record_values(record: UsageRecord) -> dict[str, Any]:
    """``record`` as its row's columns (all but ``seq``, which the database counts)."""
    return {
        "grant_id": record.grant,
        "side": record.side,
        "request_id": record.request,
        "operation": record.operation,
        "service": record.service,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "request_bytes": record.request_bytes,
        "response_bytes": record.response_bytes,
        "outcome": record.outcome,
        "counted_prompt_tokens": record.counted_prompt_tokens,
        "counted_completion_tokens": record.counted_completion_tokens,
        "told": record.told,
        "token_id": record.token,
    }


def _sums_of(row: Any) -> dict[str, int]:
    return {name: int(getattr(row, name)) for name in empty_totals()}


def record_of(row: Any) -> UsageRecord:
    return _record(
        UsageRecord,
        m.usage_records,
        row,
        request=row.request_id,
        grant=row.grant_id,
        token=row.token_id,
    )
