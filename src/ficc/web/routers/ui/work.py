"""The console's pages of work: transfers, services, models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ficc.base.errors import InvalidInput
from ficc.web.console import ConsoleContext, console, form_int, read_form
from ficc.web.presenters.services import render_service, render_services
from ficc.web.presenters.transfers import render_transfers
from ficc.web.routers import inference as inference_api
from ficc.web.routers.ui.rendering import (
    LIVE_SERVICE_STATES,
    LIVE_TRANSFER_STATES,
    P,
    action_done,
    render_page,
)
from ficc.web.schemas import ServiceControl

router = APIRouter(include_in_schema=False)
"""Console pages: HTML for a browser session, not part of the API document."""


@router.get(f"{P}/transfers", response_class=HTMLResponse)
async def transfers(request: Request, ctx: ConsoleContext = console("federation:read")) -> Response:
    found = render_transfers(await ctx.cluster.transfers.list(ctx.project))
    return await _listing(request, ctx, "transfers", "Transfers", found, LIVE_TRANSFER_STATES)


@router.post(f"{P}/transfers/{{transfer_id}}/pause")
async def pause_transfer(
    transfer_id: str, ctx: ConsoleContext = console("federation:invoke")
) -> Response:
    await ctx.cluster.transfers.pause(ctx.principal, ctx.project, transfer_id)
    return action_done("Transfer paused.")


@router.post(f"{P}/transfers/{{transfer_id}}/resume")
async def resume_transfer(
    transfer_id: str, ctx: ConsoleContext = console("federation:invoke", "models:manage")
) -> Response:
    """Resume is acquiring the same model from the same peer again, as the API does it."""
    found = await ctx.cluster.transfers.get(ctx.project, transfer_id)
    await ctx.cluster.transfers.acquire(ctx.principal, ctx.project, found.peer, model=found.model)
    return action_done("Transfer resumed.")


# --- services, models, tokens, audit ---------------------------------------------------------


@router.get(f"{P}/services", response_class=HTMLResponse)
async def services(request: Request, ctx: ConsoleContext = console("inference:read")) -> Response:
    found = render_services(await ctx.cluster.inference.commands.list_services(ctx.project))
    routes = await ctx.cluster.routes.list_routes(ctx.project)
    return await _listing(
        request, ctx, "services", "Services", found, LIVE_SERVICE_STATES, routes=routes
    )


@router.get(f"{P}/services/{{service_id}}", response_class=HTMLResponse)
async def service(
    request: Request, service_id: str, ctx: ConsoleContext = console("inference:read")
) -> Response:
    """One service with its engine log, read-only (the template escapes every line)."""
    view = await ctx.cluster.inference.commands.get_service(ctx.project, service_id)
    log = await ctx.cluster.service_logs.read(ctx.project, service_id)
    return await render_page(
        request,
        ctx,
        "service",
        f"Service {view.spec.name}",
        live=view.state.value in LIVE_SERVICE_STATES,
        service=render_service(view),
        log=log,
    )


async def _listing(
    request: Request,
    ctx: ConsoleContext,
    page: str,
    title: str,
    found: Sequence[Mapping[str, object]],
    live_states: tuple[str, ...],
    **more: Any,
) -> Response:
    """A page listing ``found`` under its own name, polling while any item is in progress;
    ``more``: what else the page shows (the services page, its routes)."""
    live = any(item["state"] in live_states for item in found)
    return await render_page(
        request,
        ctx,
        page,
        title,
        live=live,
        **{page: found},
        **more,
    )


@router.post(f"{P}/services/{{service_id}}/{{operation}}")
async def control_service(
    request: Request,
    service_id: str,
    operation: str,
    ctx: ConsoleContext = console("inference:manage"),
) -> Response:
    """Start, drain, stop or remove a service through the API's own control handler."""
    if operation not in ("start", "drain", "stop", "remove"):
        raise InvalidInput("operation must be one of start, drain, stop, remove", field="operation")
    form = await read_form(request)
    body = ServiceControl(revision=form_int(form, "revision"), operation=operation)
    await inference_api.control_service(service_id, body, Response(), idempotency_key=None, ctx=ctx)
    return action_done(f"Service {service_id}: {operation} requested.")


@router.get(f"{P}/models", response_class=HTMLResponse)
async def models(request: Request, ctx: ConsoleContext = console("models:read")) -> Response:
    found = await ctx.cluster.catalogue.list_models(ctx.project)
    return await render_page(request, ctx, "models", "Models", models=found)
