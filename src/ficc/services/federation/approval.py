"""Pairing, the service side: receive offers, approve one with a grant and a signed receipt,
hand the receipt over, and complete the pairing when the requester finishes.

A repeated finish with the same receipt is answered with the pairing already made, so a
requester whose first answer was lost completes instead of being refused.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, TypeGuard

from ficc.base.errors import Conflict, InvalidInput, RevisionMismatch
from ficc.base.ids import parse_id
from ficc.base.json_types import JSONObject
from ficc.domain.grants import parse_grant
from ficc.domain.offers import (
    MAX_LABEL_CHARS,
    MAX_RECEIVED_OFFERS,
    MAX_RECEIVED_OFFERS_PER_HYPERNET_ID,
    MAX_RECEIVED_OFFERS_PER_SOURCE,
    TRANSITIONS,
    ApprovedOfferView,
    Offer,
    OfferDirection,
    OfferState,
    clean_label,
    expiry,
    next_state,
    offer_source,
    purge_before,
)
from ficc.domain.peers import PeerRole, PeerState
from ficc.domain.principals import Principal
from ficc.domain.receipts import RECEIPT_KIND, b64, make_receipt
from ficc.domain.scopes import REMOTE_SCOPES, parse_scopes
from ficc.services.companion import COMPANION_SETTING
from ficc.services.federation.common import (
    ClusterSigner,
    FederationContext,
    check_resources,
    pending_peer,
    refuse_second_pairing,
    tell,
    view_of_offer,
    visible_offer,
)
from ficc.services.federation.grants import Grants, new_grant
from ficc.services.federation.pairing import mark_discarded, their_offer
from ficc.services.ports import UnitOfWork
from ficc.services.ports.peers import PeerIdentity, RequestResult

MAX_GENERATION: Final = 2**53
MAX_TIME_CHARS: Final = 64
RECEIPT_DIGEST: Final = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, eq=False)
class Approval:
    """Offers other clusters send to this one, from their arrival to a finished pairing."""

    context: FederationContext
    grants: Grants
    signer: ClusterSigner

    async def purge_offers(self) -> int:
        """Delete offers that expired unapproved more than the grace ago (IDs stay tombstoned)."""
        async with self.context.uow_factory() as uow:
            purged = await uow.offers.purge(expired_before=purge_before(self.context.clock()))
            if purged:
                await uow.commit()
        return purged

    async def approve_offer(
        self, principal: Principal, project: str, offer_id: str, *, revision: object, grant: object
    ) -> ApprovedOfferView:
        principal.require_scope("federation:manage")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise InvalidInput("revision must be an integer", field="revision")
        now = self.context.clock()
        me = self.context.link.hypernet_id
        async with self.context.uow_factory() as uow:
            # Two projects approving one offer at once: the second waits, then sees it approved.
            await uow.offers.lock(offer_id)
            offer = await visible_offer(uow, project, offer_id)
            if offer.direction != OfferDirection.INCOMING:
                raise Conflict("only the service side approves an offer")
            if offer.revision != revision:
                raise RevisionMismatch(
                    f"revision {revision} is stale; the offer is at revision {offer.revision}",
                    details={"revision": offer.revision},
                )
            next_state(offer, "approve", now)
            await refuse_second_pairing(uow, offer.other_hypernet_id, project)
            terms = parse_grant(grant, requested_scopes=offer.scopes)
            principal.require_scope(*sorted(terms.scopes))
            await check_resources(uow, project, terms)
            assert offer.peer_cluster_key is not None
            generation = secrets.randbelow(MAX_GENERATION - 1) + 1
            peer = pending_peer(offer, project, PeerRole.SERVICE, generation, now)
            given = new_grant(project, peer.id, terms, now)
            body = {
                "kind": RECEIPT_KIND,
                "offer": offer_id,
                "requester": offer.other_hypernet_id,
                "requester_cluster_key": offer.peer_cluster_key,
                "service": me,
                "service_cluster_key": b64(self.signer.public_key),
                "service_label": self.context.link.label,
                "scopes": sorted(offer.scopes),
                "grant": given.id,
                "grant_terms": terms.to_json(),
                "expires_at": given.expires_at.isoformat(),
                "generation": generation,
                "approved_at": now.isoformat(),
            }
            receipt = make_receipt(body, self.signer.sign)
            approved = replace(
                offer,
                project=project,
                state=OfferState.APPROVED,
                revision=offer.revision + 1,
                receipt=receipt,
                peer_id=peer.id,
            )
            await uow.peers.add(peer)
            await uow.grants.add(given)
            await uow.offers.update(approved)
            await self.context.audit(
                uow,
                principal,
                project,
                "offer.approved",
                offer_id,
                offer,
                {"grant": given.id, "peer": peer.id, "receipt": receipt["digest"]},
            )
            await uow.commit()
        self.grants.arm_expiry(given)
        pushed = await tell(
            self.context.link,
            offer.other_hypernet_id,
            "pairing.receipt",
            {"offer": offer_id, "receipt": receipt},
            None,
        )
        return ApprovedOfferView(view_of_offer(approved, now, self.context.link), pushed)

    # --- what the requester asks of us ------------------------------------------------------

    async def on_offer(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        """Record an offer from a cluster without a pairing, never under an ID used before
        (a refusal writes nothing). Waiting offers are bounded per HyperNet ID, per source
        address and in total; a full bound makes room by evicting the oldest waiting offer of
        that ID, that source, or the source holding the most (G5), never refusing the newest."""
        offer_id = parse_id("offer", body.get("offer"), field="offer")
        requested = parse_scopes(body.get("scopes"), allowed=REMOTE_SCOPES)
        label = _wire_label(body.get("label"))
        if "expires_at" in body and not _short_text(body["expires_at"], MAX_TIME_CHARS):
            raise InvalidInput(
                f"expires_at must be an RFC 3339 time of at most {MAX_TIME_CHARS} characters",
                field="expires_at",
            )
        await self.purge_offers()
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            existing = await uow.offers.get(offer_id)
            if existing is not None:
                if existing.other_hypernet_id != identity.hypernet_id:
                    raise Conflict("an offer with this ID exists")
                if existing.scopes != requested or existing.peer_label != clean_label(label):
                    raise Conflict(
                        "an offer with this ID exists with other scopes or label; a repeat "
                        "must be the same offer",
                        details={"offer": offer_id},
                    )
                return {"offer": offer_id, "label": self.context.link.label}
            if await uow.offers.ever_used(offer_id):
                raise Conflict(
                    "an offer ID is never reused; send a new offer", details={"offer": offer_id}
                )
            source = offer_source(identity.hypernet_id, identity.source)
            evicted = await _make_offer_room(uow, identity.hypernet_id, source, now)
            if evicted is not None:
                await uow.offers.delete(evicted.id)
                await self.context.audit(
                    uow, None, None, "offer.evicted", evicted.id, evicted, {"for": offer_id}
                )
            offer = Offer(
                id=offer_id,
                direction=OfferDirection.INCOMING,
                project=None,
                other_hypernet_id=identity.hypernet_id,
                peer_label=clean_label(label),
                peer_cluster_key=b64(identity.cluster_key),
                scopes=requested,
                state=OfferState.RECEIVED,
                revision=1,
                receipt=None,
                ticket=None,
                created_at=now,
                expires_at=expiry(now),
                source=source,
            )
            await uow.offers.add(offer)
            await self.context.audit(uow, None, None, "offer.received", offer_id, identity)
            await uow.commit()
        return {"offer": offer_id, "label": self.context.link.label}

    async def on_fetch(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        async with self.context.uow_factory() as uow:
            offer = await their_offer(uow, identity, body, OfferDirection.INCOMING)
        if offer.receipt is None or offer.state_at(self.context.clock()) != OfferState.APPROVED:
            raise Conflict(
                "the offer has no receipt to fetch",
                details={"state": offer.state_at(self.context.clock())},
            )
        return {"receipt": offer.receipt}

    async def on_finish(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        """Complete the pairing of an approved offer; a repeat with its receipt answers the
        pairing already made (the first answer may have been lost)."""
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            offer = await their_offer(uow, identity, body, OfferDirection.INCOMING)
            digest = body.get("receipt")
            if not _short_text(digest, 64) or not RECEIPT_DIGEST.fullmatch(digest):
                raise InvalidInput("receipt must be the receipt's digest (64 hex)", field="receipt")
            if offer.receipt is None or body.get("receipt") != offer.receipt.get("digest"):
                raise Conflict("that is not the receipt of this offer")
            assert offer.peer_id is not None
            peer = await uow.peers.get(offer.peer_id)
            if (
                offer.state == OfferState.FINISHED
                and peer is not None
                and peer.state == PeerState.PAIRED
            ):
                return {"peer": peer.id}
            next_state(offer, "finish", now)
            if peer is None or peer.state != PeerState.PENDING:
                raise Conflict("the pairing of this offer is gone")
            assert offer.project is not None
            await refuse_second_pairing(uow, identity.hypernet_id, offer.project)
            paired = replace(peer, state=PeerState.PAIRED, updated_at=now)
            await uow.peers.update(paired)
            await uow.offers.update(
                replace(offer, state=OfferState.FINISHED, revision=offer.revision + 1)
            )
            await self.context.audit(
                uow, None, offer.project, "pairing.finished", peer.id, identity, {"offer": offer.id}
            )
            await uow.commit()
        self.context.known.remember(paired)
        return {"peer": paired.id}

    async def on_discard(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            offer = await their_offer(uow, identity, body, None)
            if (offer.direction, offer.state_at(now), "discard") in TRANSITIONS:
                await mark_discarded(uow, offer, now)
                await self.context.audit(
                    uow, None, offer.project, "offer.discarded", offer.id, identity
                )
                await uow.commit()
        return {}


async def _make_offer_room(
    uow: UnitOfWork, hypernet_id: str, source: str, now: datetime
) -> Offer | None:
    """The waiting offer to evict so that one more from ``hypernet_id`` at ``source`` fits:
    the oldest of that ID at its cap, else of that source at its cap, else (all waiting offers
    at the cap) of the source holding the most; None when there is room.

    One eviction always suffices: each bound is checked before an insert of one. Offers are
    admitted one at a time under the row of the companion's configuration (which exists while
    offers can arrive), so offers arriving at the same moment cannot pass the bounds together.
    """
    await uow.settings.lock(COMPANION_SETTING)
    offers = uow.offers
    if await offers.count_received(now=now, service=hypernet_id) >= (
        MAX_RECEIVED_OFFERS_PER_HYPERNET_ID
    ):
        return await offers.oldest_received(now=now, service=hypernet_id)
    if await offers.count_received(now=now, source=source) >= MAX_RECEIVED_OFFERS_PER_SOURCE:
        return await offers.oldest_received(now=now, source=source)
    if await offers.count_received(now=now) >= MAX_RECEIVED_OFFERS:
        busiest = await offers.busiest_source(now=now)
        return await offers.oldest_received(now=now, source=busiest)
    return None


def _short_text(value: object, limit: int) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) <= limit


def _wire_label(value: object) -> str | None:
    """The requester's label as sent: absent, null, or text within the label limit (a longer
    one is refused, not cut, so the owner approves what the requester named)."""
    if value is None:
        return None
    if not _short_text(value, MAX_LABEL_CHARS):
        raise InvalidInput(
            f"label must be a string of at most {MAX_LABEL_CHARS} characters", field="label"
        )
    assert isinstance(value, str)
    return value
