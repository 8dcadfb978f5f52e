"""The FastAPI application factory: routers, error rendering, body limits, the Host check, and
the operator's view (request IDs and access log, health, metrics, the OpenAPI document)."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Final

from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ficc import __version__
from ficc.base.errors import InvalidInput
from ficc.bootstrap import Cluster
from ficc.web import api_docs, health, metrics
from ficc.web.auth import LOCAL_OWNER_SCOPE_KEY
from ficc.web.errors import envelope, install_error_handlers
from ficc.web.fast_routes import FastRoutes
from ficc.web.limits import BodyLimit
from ficc.web.observability import RequestObservability
from ficc.web.responses import FiccJSONResponse
from ficc.web.routers import (
    accounts,
    catalogue,
    federation,
    inference,
    nodes,
    openai_federated,
    openai_local,
    projects,
    routes,
    service_logs,
    transfers,
    ui,
)

ROUTERS = tuple(
    module.router
    for module in (
        accounts,
        projects,
        catalogue,
        nodes,
        inference,
        routes,
        service_logs,
        openai_local,
        openai_federated,
        federation,
        transfers,
        ui,
    )
)
OPERATIONS_ROUTERS = (health.router, metrics.router, api_docs.router)
"""Health, metrics and API docs: outside ``/api/v1``'s scope rules (public or own checks)."""


def create_app(cluster: Cluster) -> FastAPI:
    app = FastAPI(
        title="FICC",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=api_docs.OPENAPI_URL,
        default_response_class=FiccJSONResponse,
    )
    app.state.cluster = cluster
    for router in ROUTERS:
        app.include_router(router, responses=api_docs.ERROR_RESPONSES)
    for router in OPERATIONS_ROUTERS:
        app.include_router(router)
    install_error_handlers(app)
    # Innermost: the inference routes, served inside every boundary below, without FastAPI's
    # routing (see ficc.web.fast_routes).
    app.add_middleware(FastRoutes, routes=[route for router in ROUTERS for route in router.routes])
    app.add_middleware(BodyLimit)
    app.add_middleware(health.StandbyGate, cluster=cluster)
    app.add_middleware(HostCheck, cluster=cluster)
    # Last, so outermost: refusals of the Host check also get a request ID, a log line, a count.
    app.add_middleware(RequestObservability, routes=app.router.routes)
    return app


LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def _name_of(host: str) -> str:
    """The name in a Host header or listen address, without port, brackets or final dot."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


@dataclass(frozen=True)
class HostNames:
    """The names a request's Host header may carry to reach this server.

    The listen address, the public URL's host, and for a loopback listener the loopback
    names; a wildcard listener also answers to any IP literal and this machine's name. A
    DNS-rebound name (evil.example resolving to 127.0.0.1) is none of these.
    """

    names: frozenset[str]
    any_ip: bool

    @classmethod
    def of(cls, listen: str, public_url: str | None) -> HostNames:
        listen_name = _name_of(listen.rpartition(":")[0] or listen)
        names = {listen_name}
        if public_url is not None:
            names.add(_name_of(public_url.partition("://")[2].partition("/")[0]))
        address = _ip(listen_name)
        any_ip = address is not None and address.is_unspecified
        if listen_name == "localhost" or (address is not None and address.is_loopback):
            names |= LOOPBACK_NAMES
        if any_ip:
            names |= LOOPBACK_NAMES | {socket.gethostname().lower(), socket.getfqdn().lower()}
        return cls(frozenset(names), any_ip)

    def allows(self, host: str) -> bool:
        name = _name_of(host)
        return name in self.names or (self.any_ip and _ip(name) is not None)


class HostCheck:
    """Refuse a request whose Host header names another server (DNS rebinding), on every
    route, before anything else runs. The control socket is exempt: no browser reaches it."""

    def __init__(self, app: ASGIApp, *, cluster: Cluster) -> None:
        self.app = app
        self.cluster = cluster
        self._names: tuple[tuple[str, str | None], HostNames] | None = None

    def _allowed(self) -> HostNames:
        key = (self.cluster.settings.listen, self.cluster.public_url)
        if self._names is None or self._names[0] != key:
            self._names = (key, HostNames.of(*key))
        return self._names[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get(LOCAL_OWNER_SCOPE_KEY):
            await self.app(scope, receive, send)
            return
        host = next((value for name, value in scope["headers"] if name == b"host"), b"")
        if self._allowed().allows(host.decode("latin-1")):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        error = InvalidInput(
            "the Host header must name this server (its listen address or public URL)",
            field="host",
        )
        await JSONResponse(envelope(error), status_code=400)(scope, receive, send)


class LocalOwnerApp:
    """Marks every request that arrives on the control socket as the local owner's.

    Only this wrapper, mounted on the 0600 socket, sets the mark; no header can. The socket
    lets in only FICC's CLI user: its protocol checks each peer (``SO_PEERCRED``) before a
    request reaches this app, and refuses engines (``ficc.cli.serve.PeerCheckedProtocol``).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = dict(scope)
            scope[LOCAL_OWNER_SCOPE_KEY] = True
        await self.app(scope, receive, send)
