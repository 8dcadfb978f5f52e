"""Grants in SQL: terms, state, what each used, and the records a grant created."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from sqlalchemy import bindparam, insert, literal, select, union_all, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.database import HotStatement, execute_hot
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.base.times import format_time
from ficc.domain.grants import Grant, GrantState, parse_grant

_CREATED_BY_GRANT: Final = HotStatement(
    union_all(
        select(t.services.c.id, literal("service").label("kind")).where(
            t.services.c.created_by_grant == bindparam("grant")
        ),
        select(t.models.c.id, literal("model").label("kind")).where(
            t.models.c.created_by_grant == bindparam("grant")
        ),
    )
)
"""The service and model records a grant created (kept built, like ``_select_where``)."""

_CHARGE_GRANT: Final = (
    update(t.grants)
    .where(t.grants.c.id == bindparam("grant"))
    .values(
        requests_used=t.grants.c.requests_used + bindparam("requests"),
        transfer_bytes_used=t.grants.c.transfer_bytes_used + bindparam("transfer_bytes"),
    )
)

_CHARGE_ONE_REQUEST: Final = HotStatement(
    update(t.grants)
    .where(t.grants.c.id == bindparam("grant"))
    .where(t.grants.c.requests_used < bindparam("requests"))
    .values(requests_used=t.grants.c.requests_used + 1)
    .returning(t.grants.c.id)
)
"""Charge one request only while one is left: the check and the charge in one statement
(the row it returns says it charged: a driver's count of an UPDATE's rows is not needed)."""


class SqlGrants(_Repository):
    @staticmethod
    def _grant(row: Any, created_services: frozenset[str], created_models: frozenset[str]) -> Grant:
        return _record(
            Grant,
            t.grants,
            row,
            terms=parse_grant(row.terms),
            created_services=created_services,
            created_models=created_models,
            state=GrantState(row.state),
        )

    async def _load(self, row: Any) -> Grant:
        """The grant with the records it created, read in one query."""
        pairs = await execute_hot(self._c, _CREATED_BY_GRANT, {"grant": row.id})
        return self._grant(
            row,
            frozenset(r.id for r in pairs if r.kind == "service"),
            frozenset(r.id for r in pairs if r.kind == "model"),
        )

    async def add(self, grant: Grant) -> None:
        values = _row_values(grant, t.grants, terms=grant.terms.to_json())
        await self._c.execute(insert(t.grants).values(id=grant.id, **values))

    async def get(self, grant_id: str) -> Grant | None:
        row = await self._first_where(t.grants, "id", grant_id)
        return None if row is None else await self._load(row)

    async def of_peer(self, peer_id: str) -> list[Grant]:
        query = (
            select(t.grants).where(t.grants.c.peer_id == peer_id).order_by(t.grants.c.created_at)
        )
        return [await self._load(row) for row in (await self._c.execute(query)).all()]

    async def in_project(self, project: str) -> list[Grant]:
        query = (
            select(t.grants).where(t.grants.c.project == project).order_by(t.grants.c.created_at)
        )
        return [await self._load(row) for row in (await self._c.execute(query)).all()]

    async def set_state(self, grant_id: str, state: GrantState, at: datetime | None) -> None:
        values: dict[str, Any] = {"state": state}
        if at is not None:
            values["revoked_at"] = format_time(at)
        await self._update_where(t.grants, "id", grant_id, values)

    async def charge_request(self, grant_id: str, *, requests: int) -> bool:
        """Charge one request if fewer than ``requests`` were used; whether it was charged.

        One conditional UPDATE: concurrent admissions cannot both read the last request as
        free (on PostgreSQL the row lock of the UPDATE orders them; SQLite has one writer).
        """
        charged = await execute_hot(
            self._c, _CHARGE_ONE_REQUEST, {"grant": grant_id, "requests": requests}
        )
        return len(charged) == 1

    async def charge(self, grant_id: str, *, requests: int, transfer_bytes: int) -> None:
        await self._c.execute(
            _CHARGE_GRANT,
            {"grant": grant_id, "requests": requests, "transfer_bytes": transfer_bytes},
        )

    async def lock(self, grant_id: str) -> None:
        await self._lock_where(t.grants, "id", grant_id)

    async def delete(self, grant_id: str) -> None:
        await self._delete_where(t.grants, "id", grant_id)
