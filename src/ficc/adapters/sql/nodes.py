"""The cluster's nodes in SQL: what each offers (CPUs, memory, GPUs) and whether it is up."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _Repository, _req_time
from ficc.base.times import format_time
from ficc.domain.nodes import Gpu, Node


class SqlNodes(_Repository):
    @staticmethod
    def _node(row: Any) -> Node:
        return Node(
            id=row.id,
            name=row.name,
            cpu_count=row.cpu_count,
            memory_bytes=row.memory_bytes,
            memory_available_bytes=row.memory_available_bytes,
            gpus=tuple(Gpu(**gpu) for gpu in row.gpus),
            is_local=row.is_local,
            updated_at=_req_time(row.updated_at),
            ray_node_id=row.ray_node_id,
            labels=tuple(sorted((row.labels or {}).items())),
            available=row.available,
            unavailable_reason=row.unavailable_reason,
        )

    async def upsert(self, node: Node) -> None:
        values = {
            "name": node.name,
            "is_local": node.is_local,
            "cpu_count": node.cpu_count,
            "memory_bytes": node.memory_bytes,
            "memory_available_bytes": node.memory_available_bytes,
            "gpus": [gpu.__dict__ for gpu in node.gpus],
            "updated_at": format_time(node.updated_at),
            "ray_node_id": node.ray_node_id,
            "labels": dict(node.labels),
            "available": node.available,
            "unavailable_reason": node.unavailable_reason,
        }
        changed = await self._c.execute(
            update(t.nodes).where(t.nodes.c.id == node.id).values(**values)
        )
        if changed.rowcount == 0:
            await self._c.execute(insert(t.nodes).values(id=node.id, **values))

    async def get(self, node_id: str) -> Node | None:
        row = await self._first_where(t.nodes, "id", node_id)
        return None if row is None else self._node(row)

    async def list(self) -> list[Node]:
        rows = await self._c.execute(select(t.nodes).order_by(t.nodes.c.name))
        return [self._node(row) for row in rows]
