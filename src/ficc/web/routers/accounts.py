"""Tokens, browser sessions, the owner's password and one-time login links."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from ficc.bootstrap import Cluster
from ficc.domain.accounts import (
    LOGIN_LINK_LIFETIME_SECONDS,
    PLAIN_HTTP_SESSION_LIFETIME_SECONDS,
    SESSION_LIFETIME_SECONDS,
)
from ficc.domain.token_limits import TokenRestrictions
from ficc.services import accounts
from ficc.services.federation.usage import DEFAULT_USAGE_PAGE, MAX_USAGE_PAGE, parse_cursor
from ficc.web.auth import (
    Context,
    forget_session_cookie,
    public,
    scoped,
    served_over_https,
    session_cookie,
    session_cookie_name,
)
from ficc.web.schemas import PasswordSet, SessionCreate, TokenCreate
from ficc.web.schemas_federation import TokenUsagePage
from ficc.web.schemas_responses import (
    NO_CONTENT,
    LoginLink,
    Session,
    SessionCreated,
    TokenCreated,
    TokenList,
    answer,
)

router = APIRouter()


def _session_lifetime(request: Request) -> int:
    """Over plain HTTP a session is short: any server on another port of this host name
    receives its cookie (cookies are not isolated by port)."""
    if served_over_https(request):
        return SESSION_LIFETIME_SECONDS
    return PLAIN_HTTP_SESSION_LIFETIME_SECONDS


def _set_session_cookie(
    request: Request, response: Response, issued: accounts.IssuedSession
) -> None:
    response.set_cookie(
        session_cookie_name(request),
        issued.secret,
        max_age=_session_lifetime(request),
        httponly=True,
        samesite="strict",
        path="/",
        secure=served_over_https(request),
    )


def _client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


@router.post("/api/v1/tokens", status_code=201, responses=answer(TokenCreated, 201))
async def create_token(body: TokenCreate, ctx: Context = scoped("tokens:manage")) -> Any:
    issued = await ctx.cluster.accounts.tokens.create_token(
        ctx.principal,
        scopes=body.scopes,
        projects=body.projects,
        lifetime=body.lifetime,
        restrictions=body.restrictions(),
    )
    return issued_json(issued)


def issued_json(issued: accounts.IssuedToken) -> dict[str, Any]:
    """A new token as ``POST /tokens`` answers it: its secret (shown once) and its rules."""
    rules = (issued.restrictions or TokenRestrictions()).to_json()
    return {
        "id": issued.id,
        "token": issued.token,
        "scopes": issued.scopes,
        "projects": issued.projects,
        "expires_at": issued.expires_at,
        **rules,
    }


@router.get("/api/v1/tokens", responses=answer(TokenList))
async def list_tokens(ctx: Context = scoped("tokens:manage")) -> Any:
    tokens = await ctx.cluster.accounts.tokens.list_tokens(ctx.principal)
    return {"tokens": tokens}


@router.get("/api/v1/tokens/{token_id}/usage", responses=answer(TokenUsagePage))
async def token_usage(
    token_id: str,
    ctx: Context = scoped(),
    after: str | None = Query(None, max_length=32),
    limit: int = Query(DEFAULT_USAGE_PAGE, ge=1, le=MAX_USAGE_PAGE),
) -> Any:
    """The usage records a token made, and their totals: a token's own, or (``tokens:manage``)
    those of the tokens the credential may revoke."""
    if token_id != ctx.principal.token_id:
        ctx.principal.require_scope("tokens:manage")
    token = await ctx.cluster.accounts.tokens.visible_token(ctx.principal, token_id)
    return await ctx.cluster.tokens.usage(token.id, after=parse_cursor(after), limit=limit)


@router.delete("/api/v1/tokens/{token_id}", status_code=204, responses=NO_CONTENT)
async def revoke_token(token_id: str, ctx: Context = scoped("tokens:manage")) -> Response:
    await ctx.cluster.accounts.tokens.revoke_token(ctx.principal, token_id)
    return Response(status_code=204)


@router.post("/api/v1/session", status_code=201, responses=answer(SessionCreated, 201))
async def create_session(
    body: SessionCreate, request: Request, response: Response, cluster: Cluster = public()
) -> Any:
    issued = await cluster.accounts.sessions.login(
        address=_client_address(request),
        username=body.username,
        password=body.password,
        lifetime_seconds=_session_lifetime(request),
    )
    _set_session_cookie(request, response, issued)
    return {"user": issued.principal.username, "csrf_token": issued.csrf_token}


@router.get("/api/v1/session", responses=answer(Session))
async def read_session(request: Request, ctx: Context = scoped()) -> Any:
    csrf_token = None
    if ctx.principal.session_id is not None:
        sessions = ctx.cluster.accounts.sessions
        _, csrf_token = await sessions.authenticate_session(session_cookie(request) or "")
    return {
        "user": ctx.principal.username,
        "csrf_token": csrf_token,
        "scopes": ctx.principal.scopes,
        "local_owner": ctx.principal.is_owner,
    }


@router.delete("/api/v1/session", status_code=204, responses=NO_CONTENT)
async def delete_session(request: Request, ctx: Context = scoped()) -> Response:
    await ctx.cluster.accounts.sessions.logout(ctx.principal)
    response = Response(status_code=204)
    forget_session_cookie(request, response)
    return response


@router.put("/api/v1/owner/password", status_code=204, responses=NO_CONTENT)
async def set_password(
    body: PasswordSet, ctx: Context = scoped("tokens:manage", local_owner=True)
) -> Response:
    await ctx.cluster.accounts.sessions.set_password(ctx.principal, body.password)
    return Response(status_code=204)


@router.post("/api/v1/login-links", status_code=201, responses=answer(LoginLink, 201))
async def create_login_link(
    request: Request, ctx: Context = scoped("tokens:manage", local_owner=True)
) -> Any:
    secret = await ctx.cluster.accounts.login_links.create_login_link(ctx.principal)
    base = ctx.cluster.public_url or str(request.base_url).rstrip("/")
    return {"url": f"{base}/login/{secret}", "expires_in": LOGIN_LINK_LIFETIME_SECONDS}


@router.get(
    "/login/{secret}",
    status_code=303,
    response_class=RedirectResponse,
    responses={303: {"description": "Signed in: the session cookie is set; to the console."}},
)
async def open_login_link(secret: str, request: Request, cluster: Cluster = public()) -> Response:
    links = cluster.accounts.login_links
    issued = await links.consume_login_link(secret, _session_lifetime(request))
    response = RedirectResponse("/ui", status_code=303)
    _set_session_cookie(request, response, issued)
    return response
