"""Nodes of this cluster with capacity and availability."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ficc.web.auth import Context, scoped
from ficc.web.schemas_responses import NodeList, answer

router = APIRouter()


@router.get("/api/v1/nodes", responses=answer(NodeList))
async def list_nodes(ctx: Context = scoped("resources:read")) -> Any:
    found = await ctx.cluster.nodes.list_nodes()
    return {"nodes": [node.as_json() for node in found]}
