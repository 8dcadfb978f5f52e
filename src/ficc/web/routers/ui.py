"""The web UI: server-rendered pages, no JavaScript build."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from ficc.base.errors import FiccError
from ficc.bootstrap import Cluster
from ficc.services import catalogue, nodes
from ficc.web.auth import authenticate, public, select_project

router = APIRouter()
templates = Jinja2Templates(directory=str(Path(__file__).parent.parent / "templates"))


@router.get("/")
async def root(cluster: Cluster = public()) -> Response:
    return RedirectResponse("/ui", status_code=303)


@router.get("/ui", response_class=HTMLResponse)
async def index(request: Request, cluster: Cluster = public()) -> Response:
    context: dict[str, object] = {
        "label": cluster.label,
        "cluster_key": cluster.cluster_key.public_text,
        "user": None,
    }
    try:
        principal = await authenticate(request)
        project = await select_project(request, principal)
    except FiccError:
        return templates.TemplateResponse(request, "index.html", context, status_code=401)
    federation = (
        await cluster.federation.overview(project)
        if "federation:read" in principal.scopes
        else None
    )
    services = (
        await cluster.inference.list_services(project)
        if "inference:read" in principal.scopes
        else []
    )
    live = federation is not None and any(
        t["state"] in ("running", "verifying") for t in federation["transfers"]
    )
    context.update(
        federation=federation,
        services=services,
        live=live or any(s["state"] in ("starting", "draining") for s in services),
        user=principal.username,
        project=project,
        nodes=(
            await nodes.list_nodes(cluster.uow_factory)
            if "resources:read" in principal.scopes
            else []
        ),
        models=(
            await catalogue.list_models(cluster.uow_factory, project)
            if "models:read" in principal.scopes
            else []
        ),
    )
    return templates.TemplateResponse(request, "index.html", context)
