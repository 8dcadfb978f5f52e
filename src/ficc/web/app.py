"""The FastAPI application factory: routers, error rendering, body limits, and the operator's
view (request IDs and access log, health, metrics, the OpenAPI document)."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from ficc import __version__
from ficc.bootstrap import Cluster
from ficc.web import api_docs, health, metrics
from ficc.web.auth import LOCAL_OWNER_SCOPE_KEY
from ficc.web.errors import install_error_handlers
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
    app.add_middleware(BodyLimit)
    app.add_middleware(RequestObservability, routes=app.router.routes)
    return app


class LocalOwnerApp:
    """Marks every request that arrives on the control socket as the local owner's.

    Only this wrapper, mounted on the 0600 socket, sets the mark; no header can.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = dict(scope)
            scope[LOCAL_OWNER_SCOPE_KEY] = True
        await self.app(scope, receive, send)
