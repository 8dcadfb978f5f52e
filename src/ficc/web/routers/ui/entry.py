"""The console's entry: the sign-in page, its static files, the session, the overview."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ficc.base.errors import FiccError, NotFound
from ficc.bootstrap import Cluster
from ficc.web.auth import forget_session_cookie, public
from ficc.web.console import ConsoleContext, console
from ficc.web.presenters.federation import render_federation
from ficc.web.presenters.services import render_services
from ficc.web.routers.ui.rendering import (
    STATIC_DIRECTORY,
    STATIC_FILES,
    P,
    projects_of,
    render,
    render_page,
)

router = APIRouter(include_in_schema=False)
"""Console pages: HTML for a browser session, not part of the API document."""
front = APIRouter()
"""``GET /``, documented: where a browser, or a script finding its way, is sent."""

# --- entry, static files, session ------------------------------------------------------------


@front.get(
    "/",
    status_code=303,
    response_class=RedirectResponse,
    responses={303: {"description": "To the console, `/ui` (`Location` says so)."}},
)
async def root(cluster: Cluster = public()) -> Response:
    return RedirectResponse("/ui", status_code=303)


@router.get("/ui", response_class=HTMLResponse)
async def index(request: Request, cluster: Cluster = public()) -> Response:
    """The default project's overview, or the sign-in page (401) without a session."""
    try:
        ctx: ConsoleContext = await console().dependency(request)
    except FiccError:
        return render(request, "login.html", None, status_code=401, title="Sign in")
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
    await ctx.cluster.accounts.sessions.logout(ctx.principal)
    response = Response(status_code=204, headers={"HX-Redirect": "/ui"})
    forget_session_cookie(request, response)
    return response


@router.get("/ui/switch")
async def switch_project(
    project: str = Query(..., max_length=64), ctx: ConsoleContext = console()
) -> Response:
    """The project switcher's form: on to the chosen project's overview."""
    if project not in await projects_of(ctx):
        raise NotFound(f"no project {project}", details={"project": project})
    return RedirectResponse(f"/ui/p/{project}", status_code=303)


# --- overview --------------------------------------------------------------------------------


@router.get(P, response_class=HTMLResponse)
async def overview(request: Request, ctx: ConsoleContext = console()) -> Response:
    return await _overview(request, ctx)


async def _overview(request: Request, ctx: ConsoleContext) -> Response:
    scopes = ctx.principal.scopes
    federation = (
        render_federation(await ctx.cluster.federation.overview.overview(ctx.project))
        if "federation:read" in scopes
        else None
    )
    return await render_page(
        request,
        ctx,
        "overview",
        "Overview",
        cluster_key=ctx.cluster.cluster_key.public_text,
        federation=federation,
        services=(
            render_services(await ctx.cluster.inference.commands.list_services(ctx.project))
            if "inference:read" in scopes
            else None
        ),
        models=(
            await ctx.cluster.catalogue.list_models(ctx.project)
            if "models:read" in scopes
            else None
        ),
        # Nodes are the cluster's resources: shown only with resources:read, as GET /nodes.
        nodes=await ctx.cluster.nodes.list_nodes() if "resources:read" in scopes else None,
    )


# --- federation ------------------------------------------------------------------------------
