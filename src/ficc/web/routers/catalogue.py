"""The model catalogue: list, show, import (local owner) and delete models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from ficc.web.auth import Context, scoped
from ficc.web.schemas import ModelCreate
from ficc.web.schemas_responses import NO_CONTENT, Model, ModelList, answer

router = APIRouter()


@router.get("/api/v1/models", responses=answer(ModelList))
async def list_models(ctx: Context = scoped("models:read")) -> Any:
    models = await ctx.cluster.catalogue.list_models(ctx.project)
    return {"models": [model.view() for model in models]}


@router.get("/api/v1/models/{model_id}", responses=answer(Model))
async def get_model(model_id: str, ctx: Context = scoped("models:read")) -> Any:
    model = await ctx.cluster.catalogue.get_model(ctx.project, model_id)
    return model.view()


@router.post("/api/v1/models", status_code=201, responses=answer(Model, 201))
async def add_model(
    body: ModelCreate, ctx: Context = scoped("models:manage", local_owner=True)
) -> Any:
    model = await ctx.cluster.catalogue.add_model(
        ctx.principal, ctx.project, name=body.name, paths=body.paths
    )
    return model.view()


@router.delete("/api/v1/models/{model_id}", status_code=204, responses=NO_CONTENT)
async def delete_model(model_id: str, ctx: Context = scoped("models:manage")) -> Response:
    await ctx.cluster.catalogue.delete_model(ctx.principal, ctx.project, model_id)
    return Response(status_code=204)
