"""The console's federation pages: offers, peers, grants."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ficc.base.errors import NotFound
from ficc.domain.grants import (
    DEFAULT_CONCURRENT,
    DEFAULT_LIFETIME_SECONDS,
    DEFAULT_REQUEST_BYTES,
    DEFAULT_REQUESTS,
    DEFAULT_RESPONSE_BYTES,
    DEFAULT_TRANSFER_BYTES,
    MAX_CONCURRENT,
    MAX_LIFETIME_SECONDS,
    MAX_REQUEST_BYTES,
    MAX_REQUESTS,
    MAX_REQUESTS_PER_MINUTE,
    MAX_RESPONSE_BYTES,
    MAX_TOKENS,
    MAX_TOKENS_PER_MINUTE,
    MAX_TRANSFER_BYTES,
)
from ficc.domain.offers import OfferDirection
from ficc.web.console import (
    ConsoleContext,
    console,
    form_int,
    form_text,
    grant_from_form,
    read_form,
    usage_chart,
)
from ficc.web.presenters.federation import render_federation
from ficc.web.presenters.grants import render_grant
from ficc.web.presenters.offers import render_offer
from ficc.web.presenters.peers import render_peer
from ficc.web.presenters.services import render_services
from ficc.web.routers.ui.rendering import P, action_done, render_page

router = APIRouter(include_in_schema=False)
"""Console pages: HTML for a browser session, not part of the API document."""


@router.get(f"{P}/federation", response_class=HTMLResponse)
async def federation(
    request: Request, ctx: ConsoleContext = console("federation:read")
) -> Response:
    view = render_federation(await ctx.cluster.federation.overview.overview(ctx.project))
    return await render_page(request, ctx, "federation", "Federation", view=view)


@router.get(f"{P}/offers/{{offer_id}}", response_class=HTMLResponse)
async def offer(
    request: Request, offer_id: str, ctx: ConsoleContext = console("federation:read")
) -> Response:
    """The review page of an incoming offer (or the finish page of an outgoing one)."""
    found = await ctx.cluster.federation.pairing.get_offer(ctx.project, offer_id)
    incoming = found.direction is OfferDirection.INCOMING
    resources: dict[str, Any] = {}
    if incoming and "federation:manage" in ctx.principal.scopes:
        resources = await _grantable(ctx)
    return await render_page(
        request,
        ctx,
        "offer",
        "Review offer" if incoming else "Finish offer",
        offer=render_offer(found),
        defaults=_grant_defaults(list(found.scopes)),
        resources=resources,
    )


async def _grantable(ctx: ConsoleContext) -> dict[str, Any]:
    """This project's services, models and nodes, for the approval form's pickers.

    Nodes (their host names) are the cluster's resources: listed only with resources:read,
    as on the overview and GET /nodes (G14); None tells the page why the picker is empty.
    """
    return {
        "services": render_services(
            await ctx.cluster.inference.commands.list_services(ctx.project)
        ),
        "models": await ctx.cluster.catalogue.list_models(ctx.project),
        "nodes": (
            await ctx.cluster.nodes.list_nodes()
            if "resources:read" in ctx.principal.scopes
            else None
        ),
    }


def _grant_defaults(scopes: list[str]) -> dict[str, Any]:
    """The grant approval creates when nothing is changed: the reference's defaults."""
    return {
        "scopes": scopes,
        "lifetime_hours": DEFAULT_LIFETIME_SECONDS // 3600,
        "max_lifetime_hours": MAX_LIFETIME_SECONDS // 3600,
        "concurrent": DEFAULT_CONCURRENT,
        "max_concurrent": MAX_CONCURRENT,
        "requests": DEFAULT_REQUESTS,
        "max_requests": MAX_REQUESTS,
        "transfer_bytes": DEFAULT_TRANSFER_BYTES,
        "max_transfer_bytes": MAX_TRANSFER_BYTES,
        "request_bytes": DEFAULT_REQUEST_BYTES,
        "max_request_bytes": MAX_REQUEST_BYTES,
        "response_bytes": DEFAULT_RESPONSE_BYTES,
        "max_response_bytes": MAX_RESPONSE_BYTES,
        "max_tokens": MAX_TOKENS,
        "max_tokens_per_minute": MAX_TOKENS_PER_MINUTE,
        "max_requests_per_minute": MAX_REQUESTS_PER_MINUTE,
    }


@router.post(f"{P}/offers/{{offer_id}}/approve")
async def approve_offer(
    request: Request, offer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    form = await read_form(request)
    approved = await ctx.cluster.federation.approval.approve_offer(
        ctx.principal,
        ctx.project,
        offer_id,
        revision=form_int(form, "revision"),
        grant=grant_from_form(form),
    )
    receipt = approved.offer.receipt
    assert receipt is not None  # an approved offer carries the receipt it was signed with
    return action_done(f"Approved and signed. Receipt digest {receipt['digest']}.")


@router.post(f"{P}/offers/{{offer_id}}/discard")
async def discard_offer(
    offer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    await ctx.cluster.federation.pairing.discard_offer(ctx.principal, ctx.project, offer_id)
    return action_done(f"Offer {offer_id} discarded.")


@router.post(f"{P}/offers/{{offer_id}}/finish")
async def finish_offer(
    request: Request, offer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    form = await read_form(request)
    digest = "".join(form_text(form, "receipt").split())
    await ctx.cluster.federation.pairing.finish_offer(
        ctx.principal, ctx.project, offer_id, receipt=digest
    )
    return action_done("Pairing finished.")


@router.post(f"{P}/peers/{{peer_id}}/remove")
async def remove_peer(peer_id: str, ctx: ConsoleContext = console("federation:manage")) -> Response:
    removed = await ctx.cluster.federation.peers.remove_peer(ctx.principal, ctx.project, peer_id)
    told = "told" if removed.told else "not told (telling it is best effort)"
    return action_done(f"Peer removed; its grants are revoked; the peer was {told}.")


@router.post(f"{P}/peers/{{peer_id}}/forget")
async def forget_peer(peer_id: str, ctx: ConsoleContext = console("federation:manage")) -> Response:
    await ctx.cluster.federation.peers.forget_peer(ctx.principal, ctx.project, peer_id)
    return action_done("Peer forgotten; the audit log keeps its history.")


@router.post(f"{P}/peers/{{peer_id}}/select")
async def select_grant(
    request: Request, peer_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    """Refresh what the peer granted us and select one grant (``refresh`` with a grant)."""
    form = await read_form(request)
    grant = form.get("grant", [None])[0] or None
    await ctx.cluster.federation.grants.refresh(ctx.principal, ctx.project, peer_id, grant=grant)
    return action_done("Grant selected." if grant else "Grants refreshed.")


@router.get(f"{P}/grants/{{grant_id}}", response_class=HTMLResponse)
async def grant(
    request: Request, grant_id: str, ctx: ConsoleContext = console("federation:read")
) -> Response:
    view = await ctx.cluster.federation.overview.overview(ctx.project)
    given = next((item for item in view.grants if item.id == grant_id), None)
    found: Mapping[str, object] | None = None if given is None else render_grant(given)
    of_peer = (
        None
        if given is None
        else next((item for item in view.peers if item.id == given.peer), None)
    )
    received = found is None
    if found is None:
        # A grant this project holds: the peer's copy, and the last reconciliation of its
        # usage receipts.
        for item in view.peers:
            for copy in item.remote_grants:
                if copy.id == grant_id:
                    found, of_peer = {**copy.to_json(), "peer": item.id}, item
    if found is None:
        raise NotFound(f"no grant {grant_id} in project {ctx.project}", details={"grant": grant_id})
    used = await ctx.cluster.federation.usage.usage(ctx.principal, ctx.project, grant_id, limit=20)
    report = await ctx.cluster.federation.receipts.last_report(grant_id) if received else None
    return await render_page(
        request,
        ctx,
        "grant",
        "Grant",
        grant=found,
        peer=None if of_peer is None else render_peer(of_peer),
        usage=used,
        chart=usage_chart(_hours(used)[-48:]),
        received=received,
        reconciliation=report,
    )


@router.post(f"{P}/grants/{{grant_id}}/revoke")
async def revoke_grant(
    grant_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    await ctx.cluster.federation.grants.revoke_grant(ctx.principal, ctx.project, grant_id)
    return action_done(f"Grant {grant_id} revoked.")


@router.post(f"{P}/grants/{{grant_id}}/retire")
async def retire_grant(
    grant_id: str, ctx: ConsoleContext = console("federation:manage")
) -> Response:
    await ctx.cluster.federation.grants.retire_grant(ctx.principal, ctx.project, grant_id)
    return action_done(f"Grant {grant_id} retired.")


# --- transfers -------------------------------------------------------------------------------


def _hours(usage: Mapping[str, object]) -> list[Mapping[str, Any]]:
    """The usage page's tokens by hour, oldest first."""
    totals = usage.get("totals")
    hours = totals.get("hours") if isinstance(totals, dict) else None
    return [hour for hour in hours if isinstance(hour, dict)] if isinstance(hours, list) else []
