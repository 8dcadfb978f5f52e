"""Cluster settings in SQL: one JSON value per key."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _Repository


class SqlSettings(_Repository):
    async def get(self, key: str) -> Any | None:
        query = select(t.cluster_settings.c.value).where(t.cluster_settings.c.key == key)
        row = (await self._c.execute(query)).first()
        return None if row is None else row.value

    async def put(self, key: str, value: Any) -> None:
        changed = await self._c.execute(
            update(t.cluster_settings).where(t.cluster_settings.c.key == key).values(value=value)
        )
        if changed.rowcount == 0:
            await self._c.execute(insert(t.cluster_settings).values(key=key, value=value))

    async def lock(self, key: str) -> None:
        # SELECT ... FOR UPDATE on PostgreSQL; SQLite has no row locks (and one writer).
        await self._c.execute(
            select(t.cluster_settings.c.key)
            .where(t.cluster_settings.c.key == key)
            .with_for_update()
        )
