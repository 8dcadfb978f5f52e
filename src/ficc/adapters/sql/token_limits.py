"""Restricted tokens' storage: their rules, and their budgets reserved then settled as a
grant's are (one conditional UPDATE of the token's row: see ``usage_records``), and the usage
records each token made."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from sqlalchemy import Select, func, insert, select, update

from ficc.adapters.sql import metering_tables as m
from ficc.adapters.sql.budgets import BudgetRow
from ficc.adapters.sql.database import SqlConnection
from ficc.adapters.sql.usage_records import RECORD_COLUMNS, record_of, sums_of
from ficc.domain.metering import HOUR_CHARS, GrantStanding, UsageRecord, bucketed
from ficc.domain.token_limits import TokenLimit, TokenRestrictions

_ROWS = m.token_limits.c
_RECORDS = m.usage_records.c

_BUDGET: Final = BudgetRow(m.token_limits, _ROWS.token_id, counts_requests=True)


def _standing(row: Any) -> GrantStanding:
    return GrantStanding(
        requests_used=row.requests_used,
        transfer_bytes_used=0,
        prompt_tokens_used=row.prompt_tokens_used,
        completion_tokens_used=row.completion_tokens_used,
        tokens_reserved=row.tokens_reserved,
    )


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


class SqlTokenLimits:
    """Implements ``ficc.services.ports.TokenLimitsRepository``."""

    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

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
        query = select(m.token_limits).where(_ROWS.token_id == token_id)
        row = (await self._c.execute(query)).first()
        return None if row is None else _limit(row)

    async def of_tokens(self, token_ids: Collection[str]) -> dict[str, TokenLimit]:
        if not token_ids:
            return {}
        query = select(m.token_limits).where(_ROWS.token_id.in_(sorted(token_ids)))
        return {row.token_id: _limit(row) for row in await self._c.execute(query)}

    async def reserve_tokens(self, token_id: str, tokens: int, *, limit: int | None) -> bool:
        return await _BUDGET.reserve(self._c, token_id, tokens, limit)

    async def settle_tokens(
        self, token_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None:
        await _BUDGET.settle(
            self._c,
            token_id,
            reserved=reserved,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    async def standing(self, token_id: str) -> GrantStanding | None:
        query = select(m.token_limits).where(_ROWS.token_id == token_id)
        row = (await self._c.execute(query)).first()
        return None if row is None else _standing(row)

    async def clear_reservations(self) -> None:
        await self._c.execute(
            update(m.token_limits).where(_ROWS.tokens_reserved != 0).values(tokens_reserved=0)
        )

    def _mine(self, query: Select[Any], token_id: str) -> Select[Any]:
        return query.where(_RECORDS.token_id == token_id)

    async def usage_page(
        self, token_id: str, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]:
        query = self._mine(select(*RECORD_COLUMNS), token_id)
        if after is not None:
            query = query.where(_RECORDS.seq > after)
        query = query.order_by(_RECORDS.seq).limit(limit)
        return [record_of(row) for row in await self._c.execute(query)]

    async def usage_totals(self, token_id: str) -> dict[str, Any]:
        hour = func.substr(_RECORDS.started_at, 1, HOUR_CHARS).label("bucket")
        sums = [
            func.count().label("requests"),
            func.coalesce(func.sum(_RECORDS.prompt_tokens), 0).label("prompt_tokens"),
            func.coalesce(func.sum(_RECORDS.completion_tokens), 0).label("completion_tokens"),
            func.coalesce(func.sum(_RECORDS.request_bytes), 0).label("request_bytes"),
            func.coalesce(func.sum(_RECORDS.response_bytes), 0).label("response_bytes"),
        ]
        query = self._mine(select(hour, *sums), token_id)
        rows = (await self._c.execute(query.group_by(hour).order_by(hour))).all()
        return bucketed([(row.bucket, sums_of(row)) for row in rows])
