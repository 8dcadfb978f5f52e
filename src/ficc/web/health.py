"""Liveness and readiness for systemd, load balancers and orchestrators: no credential, no secret.

``/livez`` answers while the process serves HTTP at all. ``/readyz`` answers 200 only when the
database answers and its schema is the one this code expects; the companion's state is shown
in ``checks`` but does not make the cluster unready (the API serves without it).

Where processes share one database, each answer names the process's ``role``: the standby
answers ``/readyz`` 503 with ``"role": "standby"`` (a load balancer's signal to send it
nothing) and every other route 503 ``standby`` (:class:`StandbyGate`); the active answers 200
with ``"role": "active"``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from ficc.base.errors import NotActive
from ficc.bootstrap import Cluster, database_schema
from ficc.services.lease import ACTIVE, STANDBY
from ficc.web.errors import error_body
from ficc.web.observability import request_id_of

router = APIRouter(tags=["operations"])


class Liveness(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    role: Literal["active", "standby"]
    checks: dict[str, Any]


HEALTH_PATHS = frozenset({"/livez", "/readyz"})
STANDBY_RETRY_SECONDS = 1
"""``Retry-After`` on a standby's refusals: a takeover is a matter of seconds."""


class StandbyGate:
    """A standby (or a former active that lost its lease) serves health and nothing else:
    every other request is refused 503 ``standby`` before any route runs."""

    def __init__(self, app: ASGIApp, *, cluster: Cluster) -> None:
        self.app = app
        self.cluster = cluster

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or self.cluster.lease is None
            or scope["path"] in HEALTH_PATHS
            or self.cluster.role == ACTIVE
        ):
            await self.app(scope, receive, send)
            return
        error = NotActive(
            "this FICC process is the standby; the active one serves the cluster",
            details={"role": STANDBY},
        )
        body = error_body(error, scope["path"], request_id_of(scope))
        headers = {"Retry-After": str(STANDBY_RETRY_SECONDS)}
        await JSONResponse(body, status_code=error.status, headers=headers)(scope, receive, send)


@router.get("/livez", response_model=Liveness)
async def livez() -> dict[str, str]:
    return {"status": "ok"}


async def readiness(cluster: Cluster) -> tuple[bool, dict[str, Any]]:
    """Whether the cluster can serve, and each check's finding."""
    checks: dict[str, Any] = {"companion": cluster.companion.state}
    if cluster.lease is not None:
        checks["lease"] = (
            "held" if cluster.role == ACTIVE else ("lost" if cluster.lease.fenced else "waiting")
        )
    if cluster.database is None:
        checks["database"] = "in process"
        return True, checks
    schema = await database_schema(cluster.database)
    if schema is None:
        checks["database"] = "unavailable"
        checks["schema"] = "unknown"
        return False, checks
    checks["database"] = "ok"
    checks["schema"] = "ok" if schema.at_head else "outdated"
    checks["schema_revision"] = schema.current
    checks["schema_head"] = schema.head
    return schema.at_head, checks


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not ready; checks say why."}},
)
async def readyz(request: Request) -> JSONResponse:
    cluster: Cluster = request.app.state.cluster
    ready, checks = await readiness(cluster)
    role = cluster.role
    ready = ready and role == ACTIVE
    body = {"status": "ok" if ready else "unavailable", "role": role, "checks": checks}
    return JSONResponse(body, status_code=200 if ready else 503)
