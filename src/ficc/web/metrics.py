"""``GET /metrics``: the Prometheus text format, for a bearer token holding ``resources:read``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from ficc.adapters import metrics, state_gauges
from ficc.web.auth import Context, scoped

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {metrics.CONTENT_TYPE: {}}, "description": "Prometheus text"}},
)
async def scrape(ctx: Context = scoped("resources:read")) -> Response:
    cluster = ctx.cluster
    in_flight = cluster.federation.slots.in_flight_by_grant()
    if cluster.database is not None:
        # Grant IDs are per project: only the local owner sees each grant's figure.
        owner = ctx.principal.is_owner
        await state_gauges.refresh_state_gauges(cluster.database, in_flight, by_grant=owner)
    return Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)
