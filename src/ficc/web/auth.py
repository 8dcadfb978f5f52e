"""Who is calling, in which project, with which scopes: one dependency every route declares.

``scoped("models:read")`` authenticates (bearer token, session cookie with CSRF on unsafe
methods, or the control socket as local owner), selects the project from ``X-FICC-Project``
and checks the scopes. The route-enumeration test reads ``required_scopes`` from it, so no
route can forget to declare what it needs.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from fastapi import Depends, Request, Response

from ficc.base.errors import CsrfFailed, Unauthenticated
from ficc.bootstrap import Cluster
from ficc.domain.principals import Principal

SESSION_COOKIE: Final = "ficc_session"
"""The session cookie over plain HTTP (loopback): short sessions, see :func:`served_over_https`."""
SECURE_SESSION_COOKIE: Final = "__Host-ficc_session"
"""The session cookie over https: a ``__Host-`` cookie is Secure, host-only and for ``/``, so
no other host, subdomain or plain-HTTP page can set or overwrite it."""
CSRF_HEADER: Final = "x-csrf-token"
PROJECT_HEADER: Final = "x-ficc-project"
LOCAL_OWNER_SCOPE_KEY: Final = "ficc.local_owner"
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
AUTHENTICATED_ONLY: Final = "authenticated"


@dataclass(frozen=True)
class Context:
    """What a handler knows about its request: the cluster, the caller and the project."""

    cluster: Cluster
    principal: Principal
    project: str


def cluster_of(request: Request) -> Cluster:
    cluster: Cluster = request.app.state.cluster
    return cluster


def served_over_https(request: Request) -> bool:
    """Over https, or published at an https URL: the cookie must never travel in clear text."""
    public_url = cluster_of(request).public_url or ""
    return request.url.scheme == "https" or public_url.startswith("https://")


def session_cookie_name(request: Request) -> str:
    return SECURE_SESSION_COOKIE if served_over_https(request) else SESSION_COOKIE


def forget_session_cookie(request: Request, response: Response) -> None:
    """Tell the browser to drop the session cookie, by the name it was set under here."""
    response.delete_cookie(
        session_cookie_name(request),
        path="/",
        httponly=True,
        samesite="strict",
        secure=served_over_https(request),
    )


def session_cookie(request: Request) -> str | None:
    """The session secret this request carries, under the one cookie name its scheme uses."""
    return request.cookies.get(session_cookie_name(request))


async def authenticate(request: Request) -> Principal:
    cluster = cluster_of(request)
    if request.scope.get(LOCAL_OWNER_SCOPE_KEY) is True:
        return await cluster.accounts.owner.local_owner()
    if "access_token" in request.query_params or "token" in request.query_params:
        raise Unauthenticated("a credential in the query string is never accepted")
    authorization = request.headers.get("authorization")
    if authorization is not None:
        scheme, _, secret = authorization.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthenticated("the Authorization header must be 'Bearer TOKEN'")
        return await cluster.accounts.tokens.authenticate_token(secret.strip())
    cookie = session_cookie(request)
    if cookie:
        principal, csrf_token = await cluster.accounts.sessions.authenticate_session(cookie)
        if request.method not in SAFE_METHODS:
            sent = request.headers.get(CSRF_HEADER, "")
            if not hmac.compare_digest(sent.encode(), csrf_token.encode()):
                raise CsrfFailed(
                    "a cookie-authenticated request must carry the session's X-CSRF-Token"
                )
        return principal
    raise Unauthenticated("no credential: send 'Authorization: Bearer TOKEN' or log in")


async def select_project(request: Request, principal: Principal) -> str:
    """The project ``X-FICC-Project`` names (``default`` without one), if admitted."""
    header = request.headers.get(PROJECT_HEADER)
    name = header if header is not None else "default"
    return await cluster_of(request).projects.admitted(principal, name)


def scoped(*scopes: str, local_owner: bool = False) -> Any:
    """The dependency of a route that needs every scope in ``scopes`` (none: any caller)."""

    async def dependency(request: Request) -> Context:
        principal = await authenticate(request)
        project = await select_project(request, principal)
        principal.require_scope(*scopes)
        if local_owner:
            principal.require_local_owner()
        return Context(cluster=cluster_of(request), principal=principal, project=project)

    dependency.required_scopes = scopes or (AUTHENTICATED_ONLY,)  # type: ignore[attr-defined]
    dependency.local_owner = local_owner  # type: ignore[attr-defined]
    return Depends(dependency)


def public() -> Any:
    """The dependency of a route anyone may call (log in, open a login link)."""

    async def dependency(request: Request) -> Cluster:
        return cluster_of(request)

    dependency.required_scopes = ()  # type: ignore[attr-defined]
    dependency.public = True  # type: ignore[attr-defined]
    return Depends(dependency)


Handler = Callable[..., Awaitable[Any]]
