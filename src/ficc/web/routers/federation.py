"""The federation's overview and its audit log."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from ficc.services import audit
from ficc.web.auth import Context, scoped

router = APIRouter()


@router.get("/api/v1/federation/audit")
async def list_audit(
    ctx: Context = scoped("federation:read"),
    after: int = Query(0, ge=0),
    limit: int = Query(100, ge=1, le=audit.MAX_AUDIT_PAGE),
) -> Any:
    entries = await audit.list_audit(
        ctx.cluster.uow_factory, project=ctx.project, after_seq=after, limit=limit
    )
    return {
        "entries": [
            {
                "seq": entry.seq,
                "at": entry.at,
                "project": entry.project,
                "actor": entry.actor,
                "action": entry.action,
                "target": entry.target,
                "peer": (
                    None
                    if entry.peer_hypernet_id is None
                    else {
                        "hypernet_id": entry.peer_hypernet_id,
                        "cluster_key": entry.peer_cluster_key,
                    }
                ),
                "details": entry.details,
            }
            for entry in entries
        ]
    }
