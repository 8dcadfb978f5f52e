"""Liveness and readiness for systemd, load balancers and orchestrators: no credential, no secret.

``/livez`` answers while the process serves HTTP at all. ``/readyz`` answers 200 only when the
database answers and its schema is the one this code expects; the companion's state is shown
in ``checks`` but does not make the cluster unready (the API serves without it).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from ficc.adapters.sql.schema import schema_state
from ficc.bootstrap import Cluster

router = APIRouter(tags=["operations"])
log = logging.getLogger("ficc.health")


class Liveness(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, Any]


@router.get("/livez", response_model=Liveness)
async def livez() -> dict[str, str]:
    return {"status": "ok"}


async def readiness(cluster: Cluster) -> tuple[bool, dict[str, Any]]:
    """Whether the cluster can serve, and each check's finding."""
    checks: dict[str, Any] = {"companion": cluster.companion.state}
    if cluster.database is None:
        checks["database"] = "in process"
        return True, checks
    try:
        schema = await schema_state(cluster.database)
    except (OSError, sqlite3.Error, SQLAlchemyError) as exc:
        log.warning("readiness: the database does not answer: %s", exc)
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
    body = {"status": "ok" if ready else "unavailable", "checks": checks}
    return JSONResponse(body, status_code=200 if ready else 503)
