"""The Federation API (prefix /api/v1/federation): companion, offers, peers, grants, audit."""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Body, Query, Request

from ficc.domain.offers import DEFAULT_OFFERS_PAGE, MAX_OFFERS_PAGE
from ficc.services import audit
from ficc.services.federation.usage import DEFAULT_USAGE_PAGE, MAX_USAGE_PAGE
from ficc.services.ports import PeerAsk
from ficc.services.remote.table import is_streaming, streams_octets
from ficc.web import sse
from ficc.web.auth import Context, scoped
from ficc.web.bodies import json_body_schema, read_json_body
from ficc.web.fast_routes import fast_path
from ficc.web.presenters.federation import render_federation
from ficc.web.presenters.grants import render_grant, render_revoked_grant
from ficc.web.presenters.offers import (
    render_approved_offer,
    render_discarded_offer,
    render_offer,
)
from ficc.web.presenters.peers import render_pairing, render_peer, render_removed_peer
from ficc.web.schemas import (
    Configuration,
    Forget,
    OfferApprove,
    OfferCreate,
    OfferFinish,
    Reconcile,
    Refresh,
    RemoteRequest,
)
from ficc.web.schemas_federation import (
    FederationOverview,
    Grant,
    Offer,
    Reconciliation,
    UsagePage,
)
from ficc.web.schemas_responses import OPENAI_ANSWER, AuditPage, OpenObject, answer

router = APIRouter()

PREFIX: Final = "/api/v1/federation"


@router.get(f"{PREFIX}/", responses=answer(FederationOverview))
async def overview(
    offers_after: str | None = Query(None, max_length=64),
    offers_limit: int = Query(DEFAULT_OFFERS_PAGE, ge=1, le=MAX_OFFERS_PAGE),
    ctx: Context = scoped("federation:read"),
) -> Any:
    view = await ctx.cluster.federation.overview.overview(
        ctx.project, offers_after=offers_after, offers_limit=offers_limit
    )
    return render_federation(view)


@router.put(f"{PREFIX}/configuration", responses=answer(FederationOverview))
async def configure(
    body: Configuration, ctx: Context = scoped("federation:manage", local_owner=True)
) -> Any:
    await ctx.cluster.companion.configure(ctx.principal, body.agent_directory, body.label)
    return render_federation(await ctx.cluster.federation.overview.overview(ctx.project))


@router.post(f"{PREFIX}/offers", status_code=201, responses=answer(Offer, 201))
async def create_offer(body: OfferCreate, ctx: Context = scoped("federation:manage")) -> Any:
    sent = await ctx.cluster.federation.pairing.create_offer(
        ctx.principal, ctx.project, service=body.service, scopes=body.scopes, ticket=body.ticket
    )
    return render_offer(sent)


@router.post(f"{PREFIX}/offers/{{offer_id}}/approve", responses=answer(OpenObject))
async def approve_offer(
    offer_id: str, body: OfferApprove, ctx: Context = scoped("federation:manage")
) -> Any:
    approved = await ctx.cluster.federation.approval.approve_offer(
        ctx.principal, ctx.project, offer_id, revision=body.revision, grant=body.grant
    )
    return render_approved_offer(approved)


@router.post(f"{PREFIX}/offers/{{offer_id}}/finish", responses=answer(OpenObject))
async def finish_offer(
    offer_id: str, body: OfferFinish, ctx: Context = scoped("federation:manage")
) -> Any:
    finished = await ctx.cluster.federation.pairing.finish_offer(
        ctx.principal, ctx.project, offer_id, receipt=body.receipt
    )
    return render_pairing(finished)


@router.delete(f"{PREFIX}/offers/{{offer_id}}", responses=answer(OpenObject))
async def discard_offer(offer_id: str, ctx: Context = scoped("federation:manage")) -> Any:
    discarded = await ctx.cluster.federation.pairing.discard_offer(
        ctx.principal, ctx.project, offer_id
    )
    return render_discarded_offer(discarded)


@router.delete(f"{PREFIX}/peers/{{peer_id}}", responses=answer(OpenObject))
async def remove_peer(peer_id: str, ctx: Context = scoped("federation:manage")) -> Any:
    removed = await ctx.cluster.federation.peers.remove_peer(ctx.principal, ctx.project, peer_id)
    return render_removed_peer(removed)


@router.post(f"{PREFIX}/peers/{{peer_id}}/grants", status_code=201, responses=answer(Grant, 201))
async def create_grant(
    peer_id: str, grant: dict[str, Any] = Body(...), ctx: Context = scoped("federation:manage")
) -> Any:
    given = await ctx.cluster.federation.grants.create_grant(
        ctx.principal, ctx.project, peer_id, grant=grant
    )
    return render_grant(given)


@router.delete(f"{PREFIX}/grants/{{grant_id}}", responses=answer(OpenObject))
async def revoke_grant(grant_id: str, ctx: Context = scoped("federation:manage")) -> Any:
    revoked = await ctx.cluster.federation.grants.revoke_grant(ctx.principal, ctx.project, grant_id)
    return render_revoked_grant(revoked)


@router.post(f"{PREFIX}/peers/{{peer_id}}/refresh", responses=answer(OpenObject))
async def refresh(peer_id: str, body: Refresh, ctx: Context = scoped("federation:manage")) -> Any:
    refreshed = await ctx.cluster.federation.grants.refresh(
        ctx.principal, ctx.project, peer_id, grant=body.grant
    )
    return render_peer(refreshed)


@router.post(f"{PREFIX}/peers/{{peer_id}}/reconcile", responses=answer(Reconciliation))
async def reconcile(peer_id: str, body: Reconcile, ctx: Context = scoped("federation:read")) -> Any:
    """Both chains of usage receipts of each grant of the peer (or of ``grant``) compared."""
    return await ctx.cluster.federation.receipts.reconcile(
        ctx.principal, ctx.project, peer_id, grant=body.grant
    )


@router.post(f"{PREFIX}/grants/{{grant_id}}/retire", responses=answer(Grant))
async def retire_grant(grant_id: str, ctx: Context = scoped("federation:manage")) -> Any:
    retired = await ctx.cluster.federation.grants.retire_grant(ctx.principal, ctx.project, grant_id)
    return render_grant(retired)


@router.post(f"{PREFIX}/peers/{{peer_id}}/forget", responses=answer(OpenObject))
async def forget_peer(
    peer_id: str, body: Forget | None = None, ctx: Context = scoped("federation:manage")
) -> Any:
    return await ctx.cluster.federation.peers.forget_peer(
        ctx.principal, ctx.project, peer_id, erase_audit=body is not None and body.erase_audit
    )


@router.post(
    f"{PREFIX}/peers/{{peer_id}}/request",
    responses=OPENAI_ANSWER,
    openapi_extra=json_body_schema(RemoteRequest),
)
@fast_path
async def request(
    peer_id: str,
    request: Request,
    ctx: Context = scoped("federation:invoke"),
) -> Any:
    # Authenticated first (a fast route): only then may the body pass 1 MiB (G2).
    body = await read_json_body(request, RemoteRequest)
    remote = ctx.cluster.remote
    ask: PeerAsk = {"operation": body.operation, "body": body.body, "mutation_id": body.mutation_id}
    if is_streaming(body.operation, body.body):
        return await sse.relay(
            request,
            remote.open_stream(ctx.principal, ctx.project, peer_id, **ask),
            octets=streams_octets(body.operation),
        )
    return await sse.relay(request, remote.request(ctx.principal, ctx.project, peer_id, **ask))


@router.get(f"{PREFIX}/grants/{{grant_id}}/usage", responses=answer(UsagePage))
async def grant_usage(
    grant_id: str,
    ctx: Context = scoped("federation:read"),
    after: str | None = Query(None, max_length=32),
    limit: int = Query(DEFAULT_USAGE_PAGE, ge=1, le=MAX_USAGE_PAGE),
    since: str | None = Query(None, max_length=64),
    until: str | None = Query(None, max_length=64),
    receipts: bool = Query(False),
) -> Any:
    """A grant's usage records on this side (given or held), a page at a time, and totals;
    ``receipts``: each record with its signed receipt on the grantor too."""
    return await ctx.cluster.federation.usage.usage(
        ctx.principal,
        ctx.project,
        grant_id,
        after=after,
        limit=limit,
        since=since,
        until=until,
        receipts=receipts,
    )


@router.get(f"{PREFIX}/audit", responses=answer(AuditPage))
async def list_audit(
    ctx: Context = scoped("federation:read"),
    after: int = Query(0, ge=0, le=audit.MAX_AUDIT_SEQ),
    limit: int = Query(100, ge=1, le=audit.MAX_AUDIT_PAGE),
) -> Any:
    entries = await ctx.cluster.audit.list_audit(
        project=ctx.project,
        after_seq=after,
        limit=limit,
        principal=ctx.principal,
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
