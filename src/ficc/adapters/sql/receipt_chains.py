"""The requester's gaps in grants' receipt chains, and which peer gave each grant: rows only
inserted and deleted (see ``metering_tables.receipt_chains``)."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select

from ficc.adapters.sql import metering_tables as m
from ficc.adapters.sql.database import SqlConnection

_C = m.receipt_chains.c


class SqlReceiptChains:
    """Implements ``ficc.services.ports.ReceiptChainsRepository``."""

    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    async def note(self, grant_id: str, peer_id: str, after: int | None) -> None:
        await self._c.execute(
            insert(m.receipt_chains).values(grant_id=grant_id, peer_id=peer_id, after=after)
        )

    async def behind(self) -> dict[str, int]:
        query = (
            select(_C.grant_id, func.min(_C.after).label("after"))
            .where(_C.after.is_not(None))
            .group_by(_C.grant_id)
        )
        return {row.grant_id: int(row.after) for row in await self._c.execute(query)}

    async def caught_up(self, grant_id: str) -> None:
        await self._c.execute(
            delete(m.receipt_chains).where(_C.grant_id == grant_id, _C.after.is_not(None))
        )

    async def of_peer(self, peer_id: str) -> list[str]:
        query = select(_C.grant_id).where(_C.peer_id == peer_id).distinct()
        return sorted(row.grant_id for row in await self._c.execute(query))
