"""Model acquisition: start or resume, show, pause."""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter

from ficc.web.auth import Context, scoped
from ficc.web.presenters.transfers import render_transfer
from ficc.web.schemas import Acquire
from ficc.web.schemas_federation import Transfer
from ficc.web.schemas_responses import answer

router = APIRouter()

PREFIX: Final = "/api/v1/federation"


@router.post(f"{PREFIX}/peers/{{peer_id}}/models", status_code=202, responses=answer(Transfer, 202))
async def acquire_model(
    peer_id: str, body: Acquire, ctx: Context = scoped("federation:invoke", "models:manage")
) -> Any:
    return render_transfer(
        await ctx.cluster.transfers.acquire(ctx.principal, ctx.project, peer_id, model=body.model)
    )


@router.get(f"{PREFIX}/transfers/{{transfer_id}}", responses=answer(Transfer))
async def get_transfer(transfer_id: str, ctx: Context = scoped("federation:read")) -> Any:
    return render_transfer(await ctx.cluster.transfers.get(ctx.project, transfer_id))


@router.post(f"{PREFIX}/transfers/{{transfer_id}}/pause", responses=answer(Transfer))
async def pause_transfer(transfer_id: str, ctx: Context = scoped("federation:invoke")) -> Any:
    return render_transfer(
        await ctx.cluster.transfers.pause(ctx.principal, ctx.project, transfer_id)
    )
