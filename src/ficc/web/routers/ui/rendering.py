"""What every console page shares: rendering with the security headers, sections, actions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from ficc.bootstrap import Cluster
from ficc.domain.transfers import TransferState
from ficc.web.console import TEMPLATES, ConsoleContext

STATIC_DIRECTORY: Final = Path(__file__).parent.parent.parent / "static"
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
LIVE_TRANSFER_STATES: Final = (TransferState.RUNNING, TransferState.VERIFYING)
LIVE_SERVICE_STATES: Final = ("starting", "draining", "stopping")
P: Final = "/ui/p/{project}"


def render(
    request: Request,
    template: str,
    ctx: ConsoleContext | None,
    status_code: int = 200,
    **values: Any,
) -> HTMLResponse:
    """A template with what every page shows (cluster, user, project, CSRF token), sent with
    the console's security headers and never cached."""
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


async def render_page(
    request: Request, ctx: ConsoleContext, page: str, title: str, **values: Any
) -> HTMLResponse:
    """A whole page, or only its section when htmx asks for it (``?part=section``), with the
    projects the session may switch to."""
    template = f"{page}.html"
    if request.query_params.get("part") == "section":
        template = f"_{page}.html"
    projects = await projects_of(ctx)
    return render(request, template, ctx, page=page, title=title, projects=projects, **values)


def action_done(message: str) -> Response:
    """An action's answer: nothing to swap, and an event that refreshes the page's section."""
    return Response(status_code=204, headers={"HX-Trigger": json.dumps({CHANGED_EVENT: message})})


async def projects_of(ctx: ConsoleContext) -> list[str]:
    return [name for name, _ in await ctx.cluster.projects.list_projects(ctx.principal)]
