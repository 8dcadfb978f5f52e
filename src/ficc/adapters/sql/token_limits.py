"""Restricted tokens' storage: their rules, and their budgets reserved then settled as a
grant's are (one conditional UPDATE of the token's row: see ``usage_records``), and the usage
records each token made."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from sqlalchemy import insert, select

from ficc.adapters.sql import metering_tables as m
from ficc.adapters.sql.budgets import BudgetMethods, BudgetRow
from ficc.adapters.sql.repository import _record, _Repository
from ficc.adapters.sql.usage_records import page_of, totals_of
from ficc.domain.metering import GrantStanding, UsageRecord
from ficc.domain.token_limits import TokenLimit, TokenRestrictions

_ROWS = m.token_limits.c
_RECORDS = m.usage_records.c

_BUDGET: Final = BudgetRow(m.token_limits, _ROWS.token_id, counts_requests=True)


def _standing(row: Any) -> GrantStanding:
    """A token's standing: a grant's, but a token moves no files."""
    return _record(GrantStanding, m.token_limits, row, transfer_bytes_used=0)


def _limit(row: Any) -> TokenLimit:
    return TokenLimit(
        token_id=row.token_id,
        restrictions=TokenRestrictions(
            peers=None if row.peers is None else frozenset(row.peers),
            services=None if row.services is None else frozenset(row.services),
            tokens=row.tokens,
            tokens_per_minute=row.tokens_per_minute,
            requests_per_minute=row.requests_per_minute,
            parent=row.parent,
        ),
        standing=_standing(row),
    )


class SqlTokenLimits(BudgetMethods, _Repository):
    """Implements ``ficc.services.ports.TokenLimitsRepository``: its budget is the token's
    row."""

    _budget = _BUDGET

    async def add(self, token_id: str, restrictions: TokenRestrictions) -> None:
        r = restrictions
        await self._c.execute(
            insert(m.token_limits).values(
                token_id=token_id,
                parent=r.parent,
                peers=None if r.peers is None else sorted(r.peers),
                services=None if r.services is None else sorted(r.services),
                tokens=r.tokens,
                tokens_per_minute=r.tokens_per_minute,
                requests_per_minute=r.requests_per_minute,
            )
        )

    async def get(self, token_id: str) -> TokenLimit | None:
        row = await self._first_where(m.token_limits, "token_id", token_id)
        return None if row is None else _limit(row)

    async def of_tokens(self, token_ids: Collection[str]) -> dict[str, TokenLimit]:
        if not token_ids:
            return {}
        query = select(m.token_limits).where(_ROWS.token_id.in_(sorted(token_ids)))
        return {row.token_id: _limit(row) for row in await self._c.execute(query)}

    async def standing(self, token_id: str) -> GrantStanding | None:
        row = await self._first_where(m.token_limits, "token_id", token_id)
        return None if row is None else _standing(row)

    async def usage_page(
        self, token_id: str, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]:
        return await page_of(self._c, [_RECORDS.token_id == token_id], after, limit)

    async def usage_totals(self, token_id: str) -> dict[str, Any]:
        return await totals_of(self._c, [_RECORDS.token_id == token_id])
