"""A service's engine log, for local credentials holding ``inference:read``: bounded reads
that a caller follows by asking again from ``next`` (polling; no stream stays open)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from ficc.domain.inference import MAX_REPLICAS
from ficc.services.inference.logs import DEFAULT_LOG_LINES, MAX_LOG_LINES
from ficc.web.auth import Context, scoped
from ficc.web.schemas_responses import Shape, answer

router = APIRouter()


class ServiceLog(Shape):
    """Lines of one attempt's engine log; read on from ``next`` to follow it."""

    service: str
    replica: int | None
    attempt: str | None
    latest: str | None
    found: bool
    lines: list[str]
    next: int
    more: bool


@router.get("/api/v1/inference/services/{service_id}/log", responses=answer(ServiceLog))
async def read_service_log(
    service_id: str,
    lines: int = Query(DEFAULT_LOG_LINES, ge=1, le=MAX_LOG_LINES),
    after: int | None = Query(None, ge=0, le=2**63 - 1),
    replica: int | None = Query(None, ge=0, le=MAX_REPLICAS - 1),
    attempt: str | None = Query(None, max_length=64),
    ctx: Context = scoped("inference:read"),
) -> Any:
    """The last ``lines`` lines of the newest attempt (of ``replica``, or a named ``attempt``);
    with ``after``, the lines from that byte offset on (at most ``MAX_LOG_READ_BYTES``)."""
    return await ctx.cluster.service_logs.read(
        ctx.project, service_id, replica=replica, attempt=attempt, after=after, lines=lines
    )
