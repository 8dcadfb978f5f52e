"""Cluster settings in SQL: one JSON value per key."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _Repository


class SqlSettings(_Repository):
    async def get(self, key: str) -> Any | None:
        query = select(t.cluster_settings.c.value).where(t.cluster_settings.c.key == key)
        row = (await self._c.execute(query)).first()
        return None if row is None else row.value

    async def put(self, key: str, value: Any) -> None:
        if await self._update_where(t.cluster_settings, "key", key, {"value": value}) == 0:
            await self._c.execute(insert(t.cluster_settings).values(key=key, value=value))

    async def lock(self, key: str) -> None:
        await self._lock_where(t.cluster_settings, "key", key)
