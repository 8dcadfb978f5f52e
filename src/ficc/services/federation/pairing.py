"""Pairing, the requester's side: send an offer, take the receipt, finish; or discard.

Finishing records its intent before it sends: the pending peer, its generation and the receipt
are committed first, then ``pairing.finish`` goes, then the pairing is marked done. A retry of
a finish whose answer was lost sends the same receipt again, and the service side answers it
with the pairing it already made.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, replace
from datetime import datetime

from ficc.base.errors import Conflict, InvalidInput, NotFound
from ficc.base.ids import new_id, parse_id
from ficc.base.json_types import JSONObject
from ficc.domain.grants import METERED_FIELDS, GrantState
from ficc.domain.offers import (
    DiscardedOfferView,
    Offer,
    OfferDirection,
    OfferState,
    OfferView,
    clean_label,
    expiry,
    next_state,
)
from ficc.domain.peers import PairingView, Peer, PeerRole, PeerState
from ficc.domain.principals import Principal
from ficc.domain.receipts import b64, check_receipt, unb64
from ficc.domain.scopes import REMOTE_SCOPES, parse_scopes
from ficc.services.federation.common import (
    PAIRING_TIMEOUT_SECONDS,
    ClusterSigner,
    FederationContext,
    Verify,
    end_pairing,
    parse_hypernet_id,
    pending_peer,
    refuse_second_pairing,
    tell,
    view_of_offer,
    view_of_peer,
    visible_offer,
)
from ficc.services.ports import UnitOfWork
from ficc.services.ports.peers import PeerIdentity, RequestResult

MAX_TICKET_CHARS = 4096


@dataclass(frozen=True, eq=False)
class Pairing:
    """Offers this cluster sends, and the end of any offer by discarding it."""

    context: FederationContext
    signer: ClusterSigner
    verify: Verify

    def offer_view(self, offer: Offer, now: datetime) -> OfferView:
        return view_of_offer(offer, now, self.context.link)

    async def get_offer(self, project: str, offer_id: str) -> OfferView:
        async with self.context.uow_factory() as uow:
            offer = await visible_offer(uow, project, offer_id)
        return self.offer_view(offer, self.context.clock())

    async def create_offer(
        self, principal: Principal, project: str, *, service: object, scopes: object, ticket: object
    ) -> OfferView:
        """Deliver an offer to the service's cluster now; nothing is kept if that fails."""
        principal.require_scope("federation:manage")
        service_id = parse_hypernet_id(service)
        requested = parse_scopes(scopes, allowed=REMOTE_SCOPES)
        if ticket is not None and (not isinstance(ticket, str) or len(ticket) > MAX_TICKET_CHARS):
            raise InvalidInput("ticket must be a HyperNet ticket string", field="ticket")
        if service_id == self.context.link.hypernet_id:
            raise InvalidInput("a cluster cannot pair with itself", field="service")
        now = self.context.clock()
        offer_id = new_id("offer", secrets.token_bytes(16))
        expires_at = expiry(now)
        answer = await self.context.link.request(
            service_id,
            "pairing.offer",
            {
                "offer": offer_id,
                "scopes": sorted(requested),
                "label": self.context.link.label,
                "expires_at": expires_at.isoformat(),
            },
            ticket=ticket if isinstance(ticket, str) else None,
            timeout_seconds=PAIRING_TIMEOUT_SECONDS,
        )
        identity = answer.identity
        offer = Offer(
            id=offer_id,
            direction=OfferDirection.OUTGOING,
            project=project,
            other_hypernet_id=service_id,
            peer_label=clean_label(answer.body.get("label")),
            peer_cluster_key=b64(identity.cluster_key),
            scopes=requested,
            state=OfferState.SENT,
            revision=1,
            receipt=None,
            ticket=ticket if isinstance(ticket, str) else None,
            created_at=now,
            expires_at=expires_at,
        )
        async with self.context.uow_factory() as uow:
            await uow.offers.add(offer)
            await self.context.audit(uow, principal, project, "offer.sent", offer_id, identity)
            await uow.commit()
        return self.offer_view(offer, now)

    async def finish_offer(
        self, principal: Principal, project: str, offer_id: str, *, receipt: object
    ) -> PairingView:
        """Check the receipt answers exactly this offer, then complete the pairing.

        Idempotent: finishing a finished offer with its receipt answers the pairing it made.
        """
        principal.require_scope("federation:manage")
        if not isinstance(receipt, str) or not re.fullmatch(r"[0-9a-f]{64}", receipt):
            raise InvalidInput("receipt must be the receipt's digest (64 hex)", field="receipt")
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            offer = await visible_offer(uow, project, offer_id)
            if offer.direction != OfferDirection.OUTGOING:
                raise Conflict("only the requester finishes an offer", details={"offer": offer_id})
            if offer.state == OfferState.FINISHED and _digest(offer.receipt) == receipt:
                return await self._finished(uow, offer, now)
            next_state(offer, "finish", now)
            await refuse_second_pairing(uow, offer.other_hypernet_id, project)
        stored: object = offer.receipt
        if stored is None:
            fetched = await self.context.link.request(
                offer.other_hypernet_id,
                "pairing.fetch",
                {"offer": offer_id},
                ticket=offer.ticket,
                timeout_seconds=PAIRING_TIMEOUT_SECONDS,
            )
            stored = fetched.body.get("receipt")
        if not isinstance(stored, dict) or stored.get("digest") != receipt:
            raise Conflict(
                "that digest is not the receipt this offer received",
                details={"receipt": receipt},
            )
        assert offer.peer_cluster_key is not None
        body = check_receipt(
            stored,
            digest=receipt,
            offer_id=offer_id,
            requester_hypernet_id=self.context.link.hypernet_id,
            requester_cluster_key=b64(self.signer.public_key),
            service_hypernet_id=offer.other_hypernet_id,
            service_cluster_key=unb64(offer.peer_cluster_key),
            requested_scopes=offer.scopes,
            verify=self.verify,
        )
        pending = await self._intend(offer, stored, body, now)
        await self.context.link.request(
            offer.other_hypernet_id,
            "pairing.finish",
            {"offer": offer_id, "receipt": receipt},
            ticket=offer.ticket,
            timeout_seconds=PAIRING_TIMEOUT_SECONDS,
        )
        remote_grant = _remote_grant(body)
        async with self.context.uow_factory() as uow:
            peer = replace(pending, state=PeerState.PAIRED, updated_at=now)
            await uow.peers.update(peer)
            await uow.remote_grants.replace_for_peer(peer.id, [remote_grant], now)
            current = await visible_offer(uow, project, offer_id)
            finished = replace(current, state=OfferState.FINISHED, revision=current.revision + 1)
            await uow.offers.update(finished)
            await self.context.audit(
                uow, principal, project, "pairing.finished", peer.id, peer, {"offer": offer_id}
            )
            await uow.commit()
        self.context.known.remember(peer)
        return PairingView(self.offer_view(finished, now), view_of_peer(peer, [remote_grant]))

    async def _intend(
        self, offer: Offer, receipt: JSONObject, body: JSONObject, now: datetime
    ) -> Peer:
        """Commit the pairing about to be finished, still pending: the peer (the same one on a
        retry), its generation and the receipt, before ``pairing.finish`` is sent."""
        assert offer.project is not None
        assert offer.peer_cluster_key is not None
        async with self.context.uow_factory() as uow:
            current = await visible_offer(uow, offer.project, offer.id)
            existing = None if current.peer_id is None else await uow.peers.get(current.peer_id)
            if existing is not None and existing.state == PeerState.PENDING:
                return existing
            peer = pending_peer(
                offer,
                offer.project,
                PeerRole.REQUESTER,
                _generation(body),
                now,
                selected_grant=str(body["grant"]),
            )
            await uow.peers.add(peer)
            await uow.offers.update(
                replace(current, revision=current.revision + 1, receipt=receipt, peer_id=peer.id)
            )
            await uow.commit()
        return peer

    async def _finished(self, uow: UnitOfWork, offer: Offer, now: datetime) -> PairingView:
        """A finish repeated after it succeeded: the pairing it made."""
        assert offer.peer_id is not None
        peer = await uow.peers.get(offer.peer_id)
        if peer is None:
            raise Conflict("the pairing of this offer is gone", details={"offer": offer.id})
        remote = await uow.remote_grants.of_peer(peer.id)
        return PairingView(self.offer_view(offer, now), view_of_peer(peer, remote))

    async def on_receipt(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        """The service side pushes the receipt of its approval: checked, then kept."""
        receipt = body.get("receipt")
        async with self.context.uow_factory() as uow:
            offer = await their_offer(uow, identity, body, OfferDirection.OUTGOING)
            digest = receipt.get("digest") if isinstance(receipt, dict) else None
            check_receipt(
                receipt,
                digest=str(digest),
                offer_id=offer.id,
                requester_hypernet_id=self.context.link.hypernet_id,
                requester_cluster_key=b64(self.signer.public_key),
                service_hypernet_id=identity.hypernet_id,
                service_cluster_key=identity.cluster_key,
                requested_scopes=offer.scopes,
                verify=self.verify,
            )
            state = next_state(offer, "receipt", self.context.clock())
            assert isinstance(receipt, dict)
            await uow.offers.update(
                replace(offer, state=state, revision=offer.revision + 1, receipt=receipt)
            )
            await self.context.audit(
                uow, None, offer.project, "receipt.received", offer.id, identity
            )
            await uow.commit()
        return {}

    async def discard_offer(
        self, principal: Principal, project: str, offer_id: str
    ) -> DiscardedOfferView:
        async with self.context.managing(principal) as (uow, now):
            offer = await visible_offer(uow, project, offer_id)
            next_state(offer, "discard", now)
            discarded = await mark_discarded(uow, offer, now)
            await self.context.audit(uow, principal, project, "offer.discarded", offer_id, offer)
            await uow.commit()
        told = await tell(
            self.context.link,
            offer.other_hypernet_id,
            "pairing.discard",
            {"offer": offer_id},
            offer.ticket,
        )
        return DiscardedOfferView(self.offer_view(discarded, now), told)


async def mark_discarded(uow: UnitOfWork, offer: Offer, now: datetime) -> Offer:
    """Discard the offer (a new revision), in the caller's transaction, whichever side
    discards it; an unfinished peer of it goes and its grant is revoked. The offer as it is now.
    """
    discarded = replace(offer, state=OfferState.DISCARDED, revision=offer.revision + 1)
    await uow.offers.update(discarded)
    if offer.peer_id is not None:
        peer = await uow.peers.get(offer.peer_id)
        if peer is not None and peer.state == PeerState.PENDING:
            await end_pairing(uow, peer, now)
    return discarded


async def their_offer(
    uow: UnitOfWork, identity: PeerIdentity, body: JSONObject, direction: str | None
) -> Offer:
    """The offer ``body`` names, if it is one with the proven peer in ``direction`` (in
    either, when None)."""
    offer_id = parse_id("offer", body.get("offer"), field="offer")
    offer = await uow.offers.get(offer_id)
    if (
        offer is None
        or (direction is not None and offer.direction != direction)
        or offer.other_hypernet_id != identity.hypernet_id
        or offer.peer_cluster_key != b64(identity.cluster_key)
    ):
        raise NotFound(f"no offer {offer_id} with this peer", details={"offer": offer_id})
    return offer


def _digest(receipt: JSONObject | None) -> object:
    return None if receipt is None else receipt.get("digest")


def _generation(body: JSONObject) -> int:
    """A checked receipt's pairing generation (:func:`check_receipt` made sure it is one)."""
    generation = body["generation"]
    assert isinstance(generation, int)
    return generation


def _remote_grant(body: JSONObject) -> JSONObject:
    """The grant a receipt gives, as the requester keeps it until the next refresh."""
    terms = body["grant_terms"]
    assert isinstance(terms, dict)  # as check_receipt read it
    metered = {name: terms.get(name) for name in METERED_FIELDS}
    return {
        "id": body["grant"],
        "state": GrantState.ACTIVE,
        **terms,
        **metered,
        "expires_at": body["expires_at"],
        "in_flight": 0,
        "remaining": {
            "requests": terms["requests"],
            "transfer_bytes": terms["transfer_bytes"],
            "tokens": metered["tokens"],
        },
        "used": {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "transfer_bytes": 0},
    }
