"""The routes repository: a route's spec as one JSON document, its name unique per project."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _EditableRecords, _record, _row_values
from ficc.domain.routes import Route, parse_route_spec


class SqlRoutes(_EditableRecords[Route]):
    _table = t.routes

    def _read(self, row: Any) -> Route:
        return _record(Route, t.routes, row, spec=parse_route_spec(row.spec))

    def _values(self, record: Route) -> dict[str, Any]:
        return _row_values(record, t.routes, spec=record.spec.to_json())

    async def by_name(self, project: str, name: str) -> Route | None:
        query = select(t.routes).where(t.routes.c.project == project, t.routes.c.name == name)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._read(row)

    async def list(self, project: str) -> list[Route]:
        query = select(t.routes).where(t.routes.c.project == project)
        return await self._all(query.order_by(t.routes.c.name))
