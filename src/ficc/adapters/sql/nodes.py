"""The cluster's nodes in SQL: what each offers (CPUs, memory, GPUs) and whether it is up."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.nodes import Gpu, Node


class SqlNodes(_Repository):
    @staticmethod
    def _node(row: Any) -> Node:
        gpus = tuple(Gpu(**gpu) for gpu in row.gpus)
        labels = tuple(sorted((row.labels or {}).items()))
        return _record(Node, t.nodes, row, gpus=gpus, labels=labels)

    async def upsert(self, node: Node) -> None:
        values = _row_values(
            node, t.nodes, gpus=[gpu.__dict__ for gpu in node.gpus], labels=dict(node.labels)
        )
        if await self._update_where(t.nodes, "id", node.id, values) == 0:
            await self._c.execute(insert(t.nodes).values(id=node.id, **values))

    async def get(self, node_id: str) -> Node | None:
        row = await self._first_where(t.nodes, "id", node_id)
        return None if row is None else self._node(row)

    async def list(self) -> list[Node]:
        rows = await self._c.execute(select(t.nodes).order_by(t.nodes.c.name))
        return [self._node(row) for row in rows]
