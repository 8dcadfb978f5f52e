"""The console's tokens and audit log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from ficc.domain.scopes import LOCAL_SCOPES
from ficc.services import audit
from ficc.web.console import ConsoleContext, console, form_int, form_text, read_form
from ficc.web.routers import accounts as accounts_api
from ficc.web.routers import federation as federation_api
from ficc.web.routers.ui.rendering import P, action_done, render, render_page
from ficc.web.schemas import TokenCreate

router = APIRouter(include_in_schema=False)
"""Console pages: HTML for a browser session, not part of the API document."""


@router.get(f"{P}/tokens", response_class=HTMLResponse)
async def tokens(request: Request, ctx: ConsoleContext = console("tokens:manage")) -> Response:
    """The tokens this session may revoke, each with its restrictions, use and what remains,
    and the form that mints one."""
    listed = (await accounts_api.list_tokens(ctx=ctx))["tokens"]
    return await render_page(
        request,
        ctx,
        "tokens",
        "Tokens",
        all_scopes=LOCAL_SCOPES,
        tokens=listed,
    )


def _listed(form: Mapping[str, Sequence[str]], name: str) -> list[str] | None:
    """A list the form gives one entry a line (or comma-separated); blank: not restricted."""
    text = " ".join(form.get(name, []))
    entries = [entry for entry in text.replace(",", " ").split() if entry]
    return entries or None


def _optional_int(form: Mapping[str, Sequence[str]], name: str) -> int | None:
    values = form.get(name, [])
    if not values or not values[0].strip():
        return None
    return form_int(form, name)


@router.post(f"{P}/tokens", response_class=HTMLResponse)
async def create_token(
    request: Request, ctx: ConsoleContext = console("tokens:manage")
) -> Response:
    """Mint a token for this project; its secret is shown once, in the answer."""
    form = await read_form(request)
    lifetime = form_int(form, "lifetime_hours", field="lifetime") * 3600
    body = TokenCreate(
        scopes=list(form.get("scopes", [])),
        projects=[ctx.project],
        lifetime=lifetime,
        peers=_listed(form, "peers"),
        services=_listed(form, "services"),
        tokens=_optional_int(form, "tokens"),
        tokens_per_minute=_optional_int(form, "tokens_per_minute"),
        requests_per_minute=_optional_int(form, "requests_per_minute"),
    )
    issued = await accounts_api.create_token(body, ctx=ctx)
    return render(request, "_token_created.html", ctx, issued=issued)


@router.post(f"{P}/tokens/revoke")
async def revoke_token(
    request: Request, ctx: ConsoleContext = console("tokens:manage")
) -> Response:
    form = await read_form(request)
    token_id = form_text(form, "token")
    await accounts_api.revoke_token(token_id, ctx=ctx)
    return action_done(f"Token {token_id} revoked.")


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
    return await render_page(
        request,
        ctx,
        "audit",
        "Audit log",
        entries=entries,
        after=after,
        limit=limit,
        next_after=entries[-1]["seq"] if len(entries) == limit else None,
    )
