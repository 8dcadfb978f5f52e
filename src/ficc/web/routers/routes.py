"""Routes of a project: create, read, replace, remove (``inference:manage`` to change)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Response

from ficc.web.auth import Context, scoped
from ficc.web.schemas_responses import NO_CONTENT, Route, RouteList, answer

router = APIRouter()

PREFIX = "/api/v1/inference/routes"


@router.get(PREFIX, responses=answer(RouteList))
async def list_routes(ctx: Context = scoped("inference:read")) -> Any:
    return {"routes": await ctx.cluster.routes.list_routes(ctx.project)}


@router.post(PREFIX, status_code=201, responses=answer(Route, 201))
async def create_route(
    body: dict[str, Any] = Body(...), ctx: Context = scoped("inference:manage")
) -> Any:
    return await ctx.cluster.routes.create_route(ctx.project, body)


@router.get(f"{PREFIX}/{{route_id}}", responses=answer(Route))
async def get_route(route_id: str, ctx: Context = scoped("inference:read")) -> Any:
    return await ctx.cluster.routes.get_route(ctx.project, route_id)


@router.put(f"{PREFIX}/{{route_id}}", responses=answer(Route))
async def replace_route(
    route_id: str, body: dict[str, Any] = Body(...), ctx: Context = scoped("inference:manage")
) -> Any:
    return await ctx.cluster.routes.replace_route(ctx.project, route_id, body)


@router.delete(f"{PREFIX}/{{route_id}}", status_code=204, responses=NO_CONTENT)
async def remove_route(route_id: str, ctx: Context = scoped("inference:manage")) -> Response:
    await ctx.cluster.routes.remove_route(ctx.project, route_id)
    return Response(status_code=204)
