"""The routes repository: a route's spec as one JSON document, its name unique per project."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Repository, _row_values
from ficc.domain.routes import Route, parse_route_spec


class SqlRoutes(_Repository):
    @staticmethod
    def _route(row: Any) -> Route:
        return _record(Route, t.routes, row, spec=parse_route_spec(row.spec))

    @staticmethod
    def _values(route: Route) -> dict[str, Any]:
        return _row_values(route, t.routes, spec=route.spec.to_json())

    async def add(self, route: Route) -> None:
        await self._c.execute(insert(t.routes).values(id=route.id, **self._values(route)))

    async def get(self, route_id: str) -> Route | None:
        row = await self._first_where(t.routes, "id", route_id)
        return None if row is None else self._route(row)

    async def by_name(self, project: str, name: str) -> Route | None:
        query = select(t.routes).where(t.routes.c.project == project, t.routes.c.name == name)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._route(row)

    async def list(self, project: str) -> list[Route]:
        query = select(t.routes).where(t.routes.c.project == project)
        rows = await self._c.execute(query.order_by(t.routes.c.name))
        return [self._route(row) for row in rows]

    async def update(self, route: Route) -> None:
        await self._update_where(t.routes, "id", route.id, self._values(route))

    async def delete(self, route_id: str) -> None:
        await self._delete_where(t.routes, "id", route_id)
