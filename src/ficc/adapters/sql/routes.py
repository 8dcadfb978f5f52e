"""The routes repository: a route's spec as one JSON document, its name unique per project."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.database import SqlConnection
from ficc.base.times import format_time, parse_time
from ficc.domain.routes import Route, parse_route_spec


class SqlRoutes:
    def __init__(self, connection: SqlConnection) -> None:
        self._c = connection

    @staticmethod
    def _route(row: Any) -> Route:
        return Route(
            id=row.id,
            project=row.project,
            spec=parse_route_spec(row.spec),
            created_at=parse_time(row.created_at),
            updated_at=parse_time(row.updated_at),
        )

    @staticmethod
    def _values(route: Route) -> dict[str, Any]:
        return {
            "project": route.project,
            "name": route.name,
            "spec": route.spec.to_json(),
            "created_at": format_time(route.created_at),
            "updated_at": format_time(route.updated_at),
        }

    async def add(self, route: Route) -> None:
        await self._c.execute(insert(t.routes).values(id=route.id, **self._values(route)))

    async def get(self, route_id: str) -> Route | None:
        rows = await self._c.execute(select(t.routes).where(t.routes.c.id == route_id))
        row = rows.first()
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
        await self._c.execute(
            update(t.routes).where(t.routes.c.id == route.id).values(**self._values(route))
        )

    async def delete(self, route_id: str) -> None:
        await self._c.execute(delete(t.routes).where(t.routes.c.id == route_id))
