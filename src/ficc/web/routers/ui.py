"""The web console: server-rendered pages and htmx fragments, no JavaScript build.

Every action calls the same service (or the same API handler) as the HTTP API, with the same
checks: the session cookie plus the ``X-CSRF-Token`` header on every unsafe request, the scopes
of the API route, and the project named in the path. An action answers 204 with an
``HX-Trigger`` event; each page's section listens for it and fetches itself again, and pages
with work in progress poll their section instead of reloading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ficc.base.errors import FiccError, InvalidInput, NotFound
from ficc.bootstrap import Cluster
from ficc.domain import grants as g
from ficc.domain.scopes import LOCAL_SCOPES
from ficc.services import accounts, audit, catalogue, nodes, projects
from ficc.web.auth import forget_session_cookie, public
from ficc.web.console import (
    TEMPLATES,
    ConsoleContext,
    console,
    form_int,
    form_text,
    grant_from_form,
    read_form,
)
from ficc.web.routers import accounts as accounts_api
from ficc.web.routers import federation as federation_api
from ficc.web.routers import inference as inference_api
from ficc.web.schemas import ServiceControl, TokenCreate

router = APIRouter()

STATIC_DIRECTORY: Final = Path(__file__).parent.parent / "static"
STATIC_FILES: Final = {
    "htmx.min.js": "text/javascript",
    "console.js": "text/javascript",
    "console.css": "text/css",
}
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
CHANGED_EVENT: Final = "ficc-changed"
LIVE_TRANSFER_STATES: Final = ("running", "verifying")
LIVE_SERVICE_STATES: Final = ("starting", "draining", "stopping")
P: Final = "/ui/p/{project}"


def _render(
    request: Request,
    template: str,
    ctx: ConsoleContext | None,
    status_code: int = 200,
    **values: Any,
) -> HTMLResponse:
    cluster: Cluster = request.app.state.cluster
    context: dict[str, Any] = {
        "label": cluster.label,
        "now": cluster.clock(),
        "user": None if ctx is None else ctx.principal.username,
        "project": None if ctx is None else ctx.project,
        "csrf_token": "" if ctx is None else ctx.csrf_token,
        "csrf_headers": "" if ctx is None else json.dumps({"X-CSRF-Token": ctx.csrf_token}),
        "scopes": frozenset() if ctx is None else ctx.principal.scopes,
        **values,
    }
    response = TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "no-store"
    return response


def _page(
    request: Request, ctx: ConsoleContext, page: str, title: str, **values: Any
) -> HTMLResponse:
    """A whole page, or only its section when htmx asks for it (``?part=section``)."""
    template = f"{page}.html"
    if request.query_params.get("part") == "section":
        template = f"_{page}.html"
    return _render(request, template, ctx, page=page, title=title, **values)


def _done(message: str) -> Response:
    """An action's answer: nothing to swap, and an event that refreshes the page's section."""
    return Response(status_code=204, headers={"HX-Trigger": json.dumps({CHANGED_EVENT: message})})


async def _projects_of(ctx: ConsoleContext) -> list[str]:
    return [
        name for name, _ in await projects.list_projects(ctx.cluster.uow_factory, ctx.principal)
    ]


# --- entry, static files, session ------------------------------------------------------------


@router.get("/")
async def root(cluster: Cluster = public()) -> Response:
    return RedirectResponse("/ui", status_code=303)


@router.get("/ui", response_class=HTMLResponse)
async def index(request: Request, cluster: Cluster = public()) -> Response:
    """The default project's overview, or the sign-in page (401) without a session."""
    try:
        ctx: ConsoleContext = await console().dependency(request)
    except FiccError:
        return _render(request, "login.html", None, status_code=401, title="Sign in")
    return await _overview(request, ctx)


@router.get("/ui/static/{name}")
async def static(name: str, cluster: Cluster = public()) -> Response:
    """The console's own files (htmx vendored, CSS, a little JS); nothing comes from elsewhere."""
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        raise NotFound(f"no console file {name}")
    content = (STATIC_DIRECTORY / name).read_bytes()
    return Response(
        content,
        media_type=media_type,
        headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
    )


@router.post("/ui/logout")
async def logout(request: Request, ctx: ConsoleContext = console()) -> Response:
    await accounts.logout(ctx.cluster.uow_factory, ctx.cluster.clock, ctx.principal)
    response = Response(status_code=204, headers={"HX-Redirect": "/ui"})
    forget_session_cookie(request, response)
    return response


@router.get("/ui/switch")
async def switch_project(
    project: str = Query(..., max_length=64), ctx: ConsoleContext = console()
) -> Response:
    """The project switcher's form: on to the chosen project's overview."""
    if project not in await _projects_of(ctx):
        raise NotFound(f"no project {project}", details={"project": project})
    return RedirectResponse(f"/ui/p/{project}", status_code=303)


# --- overview --------------------------------------------------------------------------------


@router.get(P, response_class=HTMLResponse)
async def overview(request: Request, ctx: ConsoleContext = console()) -> Response:
    return await _overview(request, ctx)


async def _overview(request: Request, ctx: ConsoleContext) -> Response:
    scopes = ctx.principal.scopes
    federation = (
        await ctx.cluster.federation.overview.overview(ctx.project)
        if "federation:read" in scopes
        else None
    )
    return _page(
        request,
        ctx,
        "overview",
        "Overview",
        projects=await _projects_of(ctx),
        cluster_key=ctx.cluster.cluster_key.public_text,
        federation=federation,
        services=(
            await ctx.cluster.inference.commands.list_services(ctx.project)
            if "inference:read" in scopes
            else None
        ),
        models=(
            await catalogue.list_models(ctx.cluster.uow_factory, ctx.project)
            if "models:read" in scopes
            else None
        ),
        # Nodes are the cluster's resources: shown only with resources:read, as GET /nodes.
        nodes=(
            await nodes.list_nodes(ctx.cluster.uow_factory) if "resources:read" in scopes else None
        ),
    )


# --- federation ------------------------------------------------------------------------------


@router.get(f"{P}/federation", response_class=HTMLResponse)
async def federation(
    request: Request, ctx: ConsoleContext = console("federation:read")
) -> Response:
    view = await ctx.cluster.federation.overview.overview(ctx.project)
    return _page(
        request, ctx, "federation", "Federation", projects=await _projects_of(ctx), view=view
    )


@router.get(f"{P}/offers/{{offer_id}}", response_class=HTMLResponse)
async def offer(
    request: Request, offer_id: str, ctx: ConsoleContext = console("federation:read")
) -> Response:
    """The review page of an incoming offer (or the finish page of an outgoing one)."""
    found = await ctx.cluster.federation.pairing.get_offer(ctx.project, offer_id)
    resources: dict[str, Any] = {}
    if found["direction"] == "incoming" and "federation:manage" in ctx.principal.scopes:
        resources = await _grantable(ctx)
    return _page(
        request,
        ctx,
        "offer",
        "Review offer" if found["direction"] == "incoming" else "Finish offer",
        projects=await _projects_of(ctx),
        offer=found,
        defaults=_grant_defaults(found["scopes"]),
        resources=resources,
    )


async def _grantable(ctx: ConsoleContext) -> dict[str, Any]:
    """This project's services, models and nodes, for the approval form's pickers.

    Nodes (their host names) are the cluster's resources: listed only with resources:read,
    as on the overview and GET /nodes (G14); None tells the page why the picker is empty.
    """
    return {
        "services": await ctx.cluster.inference.commands.list_services(ctx.project),
        "models": await catalogue.list_models(ctx.cluster.uow_factory, ctx.project),
        "nodes": (
            await nodes.list_nodes(ctx.cluster.uow_factory)
            if "resources:read" in ctx.principal.scopes
            else None
        ),
    }


def _grant_defaults(scopes: list[str]) -> dict[str, Any]:
    """The grant approval creates when nothing is changed: the reference's defaults."""
    return {
        "scopes": scopes,
        "lifetime_hours": g.DEFAULT_LIFETIME_SECONDS // 3600,
        "max_lifetime_hours": g.MAX_LIFETIME_SECONDS // 3600,
        "concurrent": g.DEFAULT_CONCURRENT,
        "max_concurrent": g.MAX_CONCURRENT,
        "requests": g.DEFAULT_REQUESTS,
        "max_requests": g.MAX_REQUESTS,
        "transfer_bytes": g.DEFAULT_TRANSFER_BYTES,
        "max_transfer_bytes": g.MAX_TRANSFER_BYTES,
        "request_bytes": g.DEFAULT_REQUEST_BYTES,
        "max_request_bytes": g.MAX_REQUEST_BYTES,
        "response_bytes": g.DEFAULT_RESPONSE_BYTES,
        "max_response_bytes": g.MAX_RESPONSE_BYTES,
    }


@router.post(f"{P}/offers/{{offer_id}}/approve")
async def approve_offer(
    request: Request, offer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    form = await read_form(request)
    approved = await ctx.cluster.federation.approval.approve_offer(
        ctx.principal,
        ctx.project,
        offer_id,
        revision=form_int(form, "revision"),
        grant=grant_from_form(form),
    )
    return _done(f"Approved and signed. Receipt digest {approved['receipt']['digest']}.")


@router.post(f"{P}/offers/{{offer_id}}/discard")
async def discard_offer(
    offer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    await ctx.cluster.federation.pairing.discard_offer(ctx.principal, ctx.project, offer_id)
    return _done(f"Offer {offer_id} discarded.")


@router.post(f"{P}/offers/{{offer_id}}/finish")
async def finish_offer(
    request: Request, offer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    form = await read_form(request)
    digest = "".join(form_text(form, "receipt").split())
    await ctx.cluster.federation.pairing.finish_offer(
        ctx.principal, ctx.project, offer_id, receipt=digest
    )
    return _done("Pairing finished.")


@router.post(f"{P}/peers/{{peer_id}}/remove")
async def remove_peer(peer_id: str, ctx: ConsoleContext = console("federation:manage")) -> Response:
    removed = await ctx.cluster.federation.peers.remove_peer(ctx.principal, ctx.project, peer_id)
    told = "told" if removed["told"] else "not told (telling it is best effort)"
    return _done(f"Peer removed; its grants are revoked; the peer was {told}.")


@router.post(f"{P}/peers/{{peer_id}}/forget")
async def forget_peer(peer_id: str, ctx: ConsoleContext = console("federation:manage")) -> Response:
    await ctx.cluster.federation.peers.forget_peer(ctx.principal, ctx.project, peer_id)
    return _done("Peer forgotten; the audit log keeps its history.")


@router.post(f"{P}/peers/{{peer_id}}/select")
async def select_grant(
    request: Request, peer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    """Refresh what the peer granted us and select one grant (``refresh`` with a grant)."""
    form = await read_form(request)
    grant = form.get("grant", [None])[0] or None
    await ctx.cluster.federation.grants.refresh(ctx.principal, ctx.project, peer_id, grant=grant)
    return _done("Grant selected." if grant else "Grants refreshed.")


@router.get(f"{P}/grants/{{grant_id}}", response_class=HTMLResponse)
async def grant(
    request: Request, grant_id: str, ctx: ConsoleContext = console("federation:read")
) -> Response:
    view = await ctx.cluster.federation.overview.overview(ctx.project)
    found = next((item for item in view["grants"] if item["id"] == grant_id), None)
    if found is None:
        raise NotFound(f"no grant {grant_id} in project {ctx.project}", details={"grant": grant_id})
    peer = next((item for item in view["peers"] if item["id"] == found["peer"]), None)
    return _page(
        request, ctx, "grant", "Grant", projects=await _projects_of(ctx), grant=found, peer=peer
    )


@router.post(f"{P}/grants/{{grant_id}}/revoke")
async def revoke_grant(
    grant_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    await ctx.cluster.federation.grants.revoke_grant(ctx.principal, ctx.project, grant_id)
    return _done(f"Grant {grant_id} revoked.")


@router.post(f"{P}/grants/{{grant_id}}/retire")
async def retire_grant(
    grant_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    await ctx.cluster.federation.grants.retire_grant(ctx.principal, ctx.project, grant_id)
    return _done(f"Grant {grant_id} retired.")


# --- transfers -------------------------------------------------------------------------------


@router.get(f"{P}/transfers", response_class=HTMLResponse)
async def transfers(request: Request, ctx: ConsoleContext = console("federation:read")) -> Response:
    found = await ctx.cluster.transfers.list(ctx.project)
    live = any(item["state"] in LIVE_TRANSFER_STATES for item in found)
    return _page(
        request,
        ctx,
        "transfers",
        "Transfers",
        projects=await _projects_of(ctx),
        transfers=found,
        live=live,
    )


@router.post(f"{P}/transfers/{{transfer_id}}/pause")
async def pause_transfer(
    transfer_id: str, ctx: ConsoleContext = console("federation:invoke")
) -> Response:
    await ctx.cluster.transfers.pause(ctx.principal, ctx.project, transfer_id)
    return _done("Transfer paused.")


@router.post(f"{P}/transfers/{{transfer_id}}/resume")
async def resume_transfer(
    transfer_id: str, ctx: ConsoleContext = console("federation:invoke", "models:manage")
) -> Response:
    """Resume is acquiring the same model from the same peer again, as the API does it."""
    found = await ctx.cluster.transfers.get(ctx.project, transfer_id)
    await ctx.cluster.transfers.acquire(
        ctx.principal, ctx.project, found["peer"], model=found["model"]
    )
    return _done("Transfer resumed.")


# --- services, models, tokens, audit ---------------------------------------------------------


@router.get(f"{P}/services", response_class=HTMLResponse)
async def services(request: Request, ctx: ConsoleContext = console("inference:read")) -> Response:
    found = await ctx.cluster.inference.commands.list_services(ctx.project)
    live = any(item["state"] in LIVE_SERVICE_STATES for item in found)
    return _page(
        request,
        ctx,
        "services",
        "Services",
        projects=await _projects_of(ctx),
        services=found,
        live=live,
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
    return _done(f"Service {service_id}: {operation} requested.")


@router.get(f"{P}/models", response_class=HTMLResponse)
async def models(request: Request, ctx: ConsoleContext = console("models:read")) -> Response:
    found = await catalogue.list_models(ctx.cluster.uow_factory, ctx.project)
    return _page(request, ctx, "models", "Models", projects=await _projects_of(ctx), models=found)


@router.get(f"{P}/tokens", response_class=HTMLResponse)
async def tokens(request: Request, ctx: ConsoleContext = console("tokens:manage")) -> Response:
    return _page(
        request,
        ctx,
        "tokens",
        "Tokens",
        projects=await _projects_of(ctx),
        all_scopes=LOCAL_SCOPES,
    )


@router.post(f"{P}/tokens", response_class=HTMLResponse)
async def create_token(
    request: Request, ctx: ConsoleContext = console("tokens:manage")
) -> Response:
    """Mint a token for this project; its secret is shown once, in the answer."""
    form = await read_form(request)
    lifetime = form_int(form, "lifetime_hours", field="lifetime") * 3600
    body = TokenCreate(
        scopes=list(form.get("scopes", [])), projects=[ctx.project], lifetime=lifetime
    )
    issued = await accounts_api.create_token(body, ctx=ctx)
    return _render(request, "_token_created.html", ctx, issued=issued)


@router.post(f"{P}/tokens/revoke")
async def revoke_token(
    request: Request, ctx: ConsoleContext = console("tokens:manage")
) -> Response:
    form = await read_form(request)
    token_id = form_text(form, "token")
    await accounts_api.revoke_token(token_id, ctx=ctx)
    return _done(f"Token {token_id} revoked.")


@router.get(f"{P}/audit", response_class=HTMLResponse)
async def audit_log(
    request: Request,
    after: int = Query(0, ge=0, le=audit.MAX_AUDIT_SEQ),
    limit: int = Query(50, ge=1, le=audit.MAX_AUDIT_PAGE),
    ctx: ConsoleContext = console("federation:read"),
) -> Response:
    """The audit log a page at a time, oldest first, through the API's own handler."""
    page = await federation_api.list_audit(ctx=ctx, after=after, limit=limit)
    entries = page["entries"]
    return _page(
        request,
        ctx,
        "audit",
        "Audit log",
        projects=await _projects_of(ctx),
        entries=entries,
        after=after,
        limit=limit,
        next_after=entries[-1]["seq"] if len(entries) == limit else None,
    )
