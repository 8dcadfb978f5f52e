"""Pairing, peers and grants: the relationship layer of the federation.

The requester sends an offer to the service's cluster (``create_offer``); the service side
approves it with a grant and signs an acceptance receipt (``approve_offer``); the requester
checks the receipt and completes the pairing on both sides (``finish_offer``). From then on
the service side serves the requester under its grants, each request checked against the
session's proven identity: the TLS-verified HyperNet ID, the cluster key proven in the
handshake, and the pairing generation the session is bound to.

Sessions before a pairing is finished run at generation 0 and may carry only the pairing
operations; a finished pairing gets a fresh random generation, so nothing of an earlier
pairing with the same cluster comes back.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from ficc.base.errors import (
    Conflict,
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    RevisionMismatch,
    Unavailable,
)
from ficc.base.ids import new_id, parse_id
from ficc.base.times import with_times_formatted
from ficc.domain import grants as g
from ficc.domain import offers as o
from ficc.domain import peers as p
from ficc.domain.principals import Principal
from ficc.domain.receipts import RECEIPT_KIND, b64, check_receipt, make_receipt, unb64
from ficc.domain.scopes import REMOTE_SCOPES, parse_scopes
from ficc.protocol.handshake import KnownPeer
from ficc.services import audit
from ficc.services.companion import Companion
from ficc.services.grant_slots import GrantSlots
from ficc.services.peer_channel import PeerIdentity, RequestResult
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory

log = logging.getLogger("ficc.federation")

PAIRING_TIMEOUT_SECONDS: Final = 10.0
NOTICE_TIMEOUT_SECONDS: Final = 3.0
MAX_GENERATION: Final = 2**53
HYPERNET_ID: Final = re.compile(r"^[0-9a-f]{64}$")
MAX_TICKET_CHARS: Final = 4096

RemoteHandler = Callable[[PeerIdentity, dict[str, Any]], Awaitable[RequestResult]]


@dataclass(frozen=True)
class ClusterSigner:
    public_key: bytes
    sign: Callable[[bytes], bytes]


Verify = Callable[[bytes, bytes, bytes], bool]


def parse_hypernet_id(value: object, *, field: str = "service") -> str:
    if not isinstance(value, str) or not HYPERNET_ID.match(value):
        raise InvalidInput(f"{field} must be a HyperNet ID (64 lowercase hex)", field=field)
    return value


class Federation:
    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        companion: Companion,
        signer: ClusterSigner,
        verify: Verify,
        slots: GrantSlots,
    ) -> None:
        self._uow_factory = uow_factory
        self._clock = clock
        self.companion = companion
        self._signer = signer
        self._verify = verify
        self.slots = slots
        self._known: dict[str, KnownPeer] = {}
        self._handlers: dict[str, RemoteHandler] = {
            "pairing.offer": self._on_offer,
            "pairing.receipt": self._on_receipt,
            "pairing.fetch": self._on_fetch,
            "pairing.finish": self._on_finish,
            "pairing.discard": self._on_discard,
            "peer.removed": self._on_peer_removed,
            "grant.revoked": self._on_grant_revoked,
            "grants.list": self._on_grants_list,
        }
        self.on_grant_ended: list[Callable[[g.Grant], Awaitable[None]]] = []
        self.transfers_of: Callable[[str], Awaitable[list[dict[str, Any]]]] | None = None
        self._expiry_timers: dict[str, asyncio.TimerHandle] = {}
        self._expiring: set[asyncio.Task[None]] = set()

    # --- the transport's view -------------------------------------------------------------

    async def load(self) -> None:
        """Fill the cache of paired peers the handshake looks up; arm each grant's expiry."""
        async with self._uow_factory() as uow:
            projects = [name for name, _ in await uow.projects.list()]
            peers = [peer for name in projects for peer in await uow.peers.in_project(name)]
            grants = [grant for peer in peers for grant in await uow.grants.of_peer(peer.id)]
        self._known = {
            peer.hypernet_id: KnownPeer(unb64(peer.cluster_key), peer.generation)
            for peer in peers
            if peer.state == p.PAIRED
        }
        for grant in grants:
            self._arm_expiry(grant)
        await self.purge_offers()

    def close(self) -> None:
        """Disarm the expiry timers (the process is stopping; they are armed again at load)."""
        for timer in self._expiry_timers.values():
            timer.cancel()
        self._expiry_timers.clear()
        for task in self._expiring:
            task.cancel()

    async def purge_offers(self) -> int:
        """Delete offers that expired unapproved more than the grace ago (IDs stay tombstoned)."""
        async with self._uow_factory() as uow:
            purged = await uow.offers.purge(expired_before=o.purge_before(self._clock()))
            if purged:
                await uow.commit()
        return purged

    async def lookup(self, hypernet_id: str) -> KnownPeer | None:
        return self._known.get(hypernet_id)

    def _remember(self, peer: p.Peer) -> None:
        if peer.state == p.PAIRED:
            self._known[peer.hypernet_id] = KnownPeer(unb64(peer.cluster_key), peer.generation)
        elif (known := self._known.get(peer.hypernet_id)) is not None and (
            known.generation == peer.generation
        ):
            del self._known[peer.hypernet_id]

    def register(self, operation: str, handler: RemoteHandler) -> None:
        """Add an operation the service side serves (the grant operations)."""
        self._handlers[operation] = handler

    async def handle(
        self, identity: PeerIdentity, operation: str, body: dict[str, Any]
    ) -> RequestResult:
        handler = self._handlers.get(operation)
        if handler is None:
            raise InvalidInput(f"unknown operation {operation}", field="operation")
        return await handler(identity, body)

    async def paired_peer(self, uow: UnitOfWork, identity: PeerIdentity) -> p.Peer:
        """The peer this session proves to be, paired at the session's generation."""
        for peer in await uow.peers.by_hypernet_id(identity.hypernet_id):
            if (
                peer.state == p.PAIRED
                and peer.generation == identity.generation
                and unb64(peer.cluster_key) == identity.cluster_key
            ):
                return peer
        raise PermissionDenied(
            "this cluster has no pairing with the requesting peer at this generation",
            details={"reason": "not_paired"},
        )

    # --- overview ---------------------------------------------------------------------------

    async def overview(
        self,
        project: str,
        *,
        offers_after: str | None = None,
        offers_limit: int = o.DEFAULT_OFFERS_PAGE,
    ) -> dict[str, Any]:
        """The project's federation; offers a page at a time, oldest first: ``offers_next``
        names the last one shown when more follow (pass it as ``offers_after``)."""
        now = self._clock()
        if offers_after is not None:
            offers_after = parse_id("offer", offers_after, field="offers_after")
        if isinstance(offers_limit, bool) or not 1 <= offers_limit <= o.MAX_OFFERS_PAGE:
            raise InvalidInput(
                f"offers_limit must be an integer from 1 to {o.MAX_OFFERS_PAGE}",
                field="offers_limit",
            )
        async with self._uow_factory() as uow:
            peers = await uow.peers.in_project(project)
            offers = await uow.offers.visible_to(
                project, after=offers_after, limit=offers_limit + 1
            )
            grants = await uow.grants.in_project(project)
            remote = {peer.id: await uow.remote_grants.of_peer(peer.id) for peer in peers}
        return {
            "companion": self.companion.companion_json(),
            "identity": self.companion.identity_json(),
            "project": project,
            "peers": [peer_json(peer, remote[peer.id]) for peer in peers],
            "offers": [self._offer_json(offer, now) for offer in offers[:offers_limit]],
            "offers_next": offers[offers_limit - 1].id if len(offers) > offers_limit else None,
            "grants": [self.grant_json(grant, now) for grant in grants],
            "transfers": [] if self.transfers_of is None else await self.transfers_of(project),
        }

    def grant_json(self, grant: g.Grant, now: datetime) -> dict[str, Any]:
        return {
            "id": grant.id,
            "peer": grant.peer_id,
            "state": grant.state_at(now),
            **grant.terms.to_json(),
            "created_at": grant.created_at,
            "expires_at": grant.expires_at,
            "revoked_at": grant.revoked_at,
            "in_flight": self.slots.in_flight(grant.id),
            "remaining": grant.remaining(),
            "created_services": sorted(grant.created_services),
            "created_models": sorted(grant.created_models),
        }

    def _offer_json(self, offer: o.Offer, now: datetime) -> dict[str, Any]:
        me = self.companion.identity_json()["hypernet_id"]
        outgoing = offer.direction == o.OUTGOING
        return {
            "id": offer.id,
            "direction": offer.direction,
            "service": offer.service if outgoing else me,
            "requester": me if outgoing else offer.service,
            "label": offer.peer_label,
            "cluster_key": offer.peer_cluster_key,
            "scopes": sorted(offer.scopes),
            "state": offer.state_at(now),
            "revision": offer.revision,
            "receipt": offer.receipt,
            "expires_at": offer.expires_at,
            "peer": offer.peer_id,
            "project": offer.project,
        }

    async def get_offer(self, project: str, offer_id: str) -> dict[str, Any]:
        async with self._uow_factory() as uow:
            offer = await self._visible_offer(uow, project, offer_id)
        return self._offer_json(offer, self._clock())

    async def _visible_offer(self, uow: UnitOfWork, project: str, offer_id: str) -> o.Offer:
        offer = await uow.offers.get(offer_id)
        if offer is None or offer.project not in (None, project):
            raise NotFound(f"no offer {offer_id}", details={"offer": offer_id})
        return offer

    async def _project_peer(self, uow: UnitOfWork, project: str, peer_id: str) -> p.Peer:
        peer = await uow.peers.get(peer_id)
        if peer is None or peer.project != project:
            raise NotFound(f"no peer {peer_id} in project {project}", details={"peer": peer_id})
        return peer

    async def _project_grant(self, uow: UnitOfWork, project: str, grant_id: str) -> g.Grant:
        grant = await uow.grants.get(grant_id)
        if grant is None or grant.project != project:
            raise NotFound(f"no grant {grant_id} in project {project}", details={"grant": grant_id})
        return grant

    # --- requester side ---------------------------------------------------------------------

    async def create_offer(
        self, principal: Principal, project: str, *, service: object, scopes: object, ticket: object
    ) -> dict[str, Any]:
        """Deliver an offer to the service's cluster now; nothing is kept if that fails."""
        principal.require_scope("federation:manage")
        service_id = parse_hypernet_id(service)
        requested = parse_scopes(scopes, allowed=REMOTE_SCOPES)
        if ticket is not None and (not isinstance(ticket, str) or len(ticket) > MAX_TICKET_CHARS):
            raise InvalidInput("ticket must be a HyperNet ticket string", field="ticket")
        transport = self.companion.transport
        if service_id == transport.hypernet_id:
            raise InvalidInput("a cluster cannot pair with itself", field="service")
        now = self._clock()
        offer_id = new_id("offer", secrets.token_bytes(16))
        expires_at = o.expiry(now)
        answer = await transport.request(
            service_id,
            "pairing.offer",
            {
                "offer": offer_id,
                "scopes": sorted(requested),
                "label": self.companion.label,
                "expires_at": expires_at.isoformat(),
            },
            ticket=ticket if isinstance(ticket, str) else None,
            timeout_seconds=PAIRING_TIMEOUT_SECONDS,
        )
        identity = transport.identity_of(service_id)
        if identity is None or identity.hypernet_id != service_id:
            raise Conflict("the service's identity could not be proven; try again")
        offer = o.Offer(
            id=offer_id,
            direction=o.OUTGOING,
            project=project,
            service=service_id,
            peer_label=o.clean_label(answer.get("label")),
            peer_cluster_key=b64(identity.cluster_key),
            scopes=requested,
            state=o.SENT,
            revision=1,
            receipt=None,
            ticket=ticket if isinstance(ticket, str) else None,
            created_at=now,
            expires_at=expires_at,
        )
        async with self._uow_factory() as uow:
            await uow.offers.add(offer)
            await self._audit(uow, principal, project, "offer.sent", offer_id, identity)
            await uow.commit()
        return self._offer_json(offer, now)

    async def finish_offer(
        self, principal: Principal, project: str, offer_id: str, *, receipt: object
    ) -> dict[str, Any]:
        """Check the receipt answers exactly this offer, then complete the pairing."""
        principal.require_scope("federation:manage")
        if not isinstance(receipt, str) or not re.fullmatch(r"[0-9a-f]{64}", receipt):
            raise InvalidInput("receipt must be the receipt's digest (64 hex)", field="receipt")
        now = self._clock()
        async with self._uow_factory() as uow:
            offer = await self._visible_offer(uow, project, offer_id)
            if offer.direction != o.OUTGOING:
                raise Conflict("only the requester finishes an offer", details={"offer": offer_id})
            o.next_state(offer, "finish", now)
            await self._refuse_second_pairing(uow, offer.service)
        transport = self.companion.transport
        stored = offer.receipt
        if stored is None:
            fetched = await transport.request(
                offer.service,
                "pairing.fetch",
                {"offer": offer_id},
                ticket=offer.ticket,
                timeout_seconds=PAIRING_TIMEOUT_SECONDS,
            )
            stored = fetched.get("receipt")
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
            requester_hypernet_id=transport.hypernet_id,
            requester_cluster_key=b64(self._signer.public_key),
            service_hypernet_id=offer.service,
            service_cluster_key=unb64(offer.peer_cluster_key),
            requested_scopes=offer.scopes,
            verify=self._verify,
        )
        await transport.request(
            offer.service,
            "pairing.finish",
            {"offer": offer_id, "receipt": receipt},
            ticket=offer.ticket,
            timeout_seconds=PAIRING_TIMEOUT_SECONDS,
        )
        peer = p.Peer(
            id=new_id("peer", secrets.token_bytes(16)),
            project=project,
            label=offer.peer_label,
            hypernet_id=offer.service,
            cluster_key=offer.peer_cluster_key,
            state=p.PAIRED,
            generation=int(body["generation"]),
            role=p.REQUESTER,
            offer_id=offer_id,
            selected_grant=str(body["grant"]),
            ticket=offer.ticket,
            created_at=now,
            updated_at=now,
        )
        remote_grant = {
            "id": body["grant"],
            "state": g.ACTIVE,
            **body["grant_terms"],
            "expires_at": body["expires_at"],
            "in_flight": 0,
            "remaining": {
                "requests": body["grant_terms"]["requests"],
                "transfer_bytes": body["grant_terms"]["transfer_bytes"],
            },
        }
        async with self._uow_factory() as uow:
            await uow.peers.add(peer)
            await uow.remote_grants.replace_for_peer(peer.id, [remote_grant], now)
            finished = replace(
                offer,
                state=o.FINISHED,
                revision=offer.revision + 1,
                receipt=stored,
                peer_id=peer.id,
            )
            await uow.offers.update(finished)
            await self._audit(
                uow,
                principal,
                project,
                "pairing.finished",
                peer.id,
                _proven_peer(peer),
                {"offer": offer_id},
            )
            await uow.commit()
        self._remember(peer)
        return {"offer": self._offer_json(finished, now), "peer": peer_json(peer, [remote_grant])}

    async def discard_offer(
        self, principal: Principal, project: str, offer_id: str
    ) -> dict[str, Any]:
        principal.require_scope("federation:manage")
        now = self._clock()
        async with self._uow_factory() as uow:
            offer = await self._visible_offer(uow, project, offer_id)
            o.next_state(offer, "discard", now)
            discarded = replace(offer, state=o.DISCARDED, revision=offer.revision + 1)
            await uow.offers.update(discarded)
            await self._drop_pending_peer(uow, offer, now)
            await self._audit(
                uow, principal, project, "offer.discarded", offer_id, _proven_offerer(offer)
            )
            await uow.commit()
        told = await self._tell(offer.service, "pairing.discard", {"offer": offer_id}, offer.ticket)
        return {**self._offer_json(discarded, now), "told": told}

    async def refresh(
        self, principal: Principal, project: str, peer_id: str, *, grant: object
    ) -> dict[str, Any]:
        """``{}`` asks the peer for the grants it gives us; ``{"grant": ID}`` selects one."""
        principal.require_scope("federation:manage")
        now = self._clock()
        async with self._uow_factory() as uow:
            peer = await self._project_peer(uow, project, peer_id)
            if grant is not None:
                grant_id = parse_id("grant", grant, field="grant")
                known = {item["id"] for item in await uow.remote_grants.of_peer(peer_id)}
                if grant_id not in known:
                    raise NotFound(
                        f"the peer gives this project no grant {grant_id}; refresh first",
                        details={"grant": grant_id},
                    )
                peer = replace(peer, selected_grant=grant_id, updated_at=now)
                await uow.peers.update(peer)
                await self._audit(
                    uow, principal, project, "grant.selected", grant_id, _proven_peer(peer)
                )
                await uow.commit()
                remote = await uow.remote_grants.of_peer(peer_id)
                return peer_json(peer, remote)
        if peer.state != p.PAIRED:
            raise Conflict(f"peer {peer_id} is {peer.state}", details={"state": peer.state})
        answer = await self.companion.transport.request(
            peer.hypernet_id,
            "grants.list",
            {},
            ticket=peer.ticket,
            timeout_seconds=PAIRING_TIMEOUT_SECONDS,
        )
        listed = answer.get("grants")
        if not isinstance(listed, list) or not all(isinstance(i, dict) for i in listed):
            raise Conflict("the peer answered grants.list with something else")
        async with self._uow_factory() as uow:
            await uow.remote_grants.replace_for_peer(peer_id, listed, now)
            await uow.commit()
        return peer_json(peer, listed)

    # --- service side -------------------------------------------------------------------------

    async def approve_offer(
        self, principal: Principal, project: str, offer_id: str, *, revision: object, grant: object
    ) -> dict[str, Any]:
        principal.require_scope("federation:manage")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise InvalidInput("revision must be an integer", field="revision")
        now = self._clock()
        transport = self.companion.transport
        async with self._uow_factory() as uow:
            # Two projects approving one offer at once: the second waits, then sees it approved.
            await uow.offers.lock(offer_id)
            offer = await self._visible_offer(uow, project, offer_id)
            if offer.direction != o.INCOMING:
                raise Conflict("only the service side approves an offer")
            if offer.revision != revision:
                raise RevisionMismatch(
                    f"revision {revision} is stale; the offer is at revision {offer.revision}",
                    details={"revision": offer.revision},
                )
            o.next_state(offer, "approve", now)
            await self._refuse_second_pairing(uow, offer.service)
            terms = g.parse_grant(grant, requested_scopes=offer.scopes)
            principal.require_scope(*sorted(terms.scopes))
            await self._check_resources(uow, project, terms)
            assert offer.peer_cluster_key is not None
            generation = secrets.randbelow(MAX_GENERATION - 1) + 1
            peer = p.Peer(
                id=new_id("peer", secrets.token_bytes(16)),
                project=project,
                label=offer.peer_label,
                hypernet_id=offer.service,
                cluster_key=offer.peer_cluster_key,
                state=p.PENDING,
                generation=generation,
                role=p.SERVICE,
                offer_id=offer_id,
                selected_grant=None,
                ticket=None,
                created_at=now,
                updated_at=now,
            )
            given = g.Grant(
                id=new_id("grant", secrets.token_bytes(16)),
                project=project,
                peer_id=peer.id,
                terms=terms,
                state=g.ACTIVE,
                created_at=now,
                expires_at=g.expiry_of(now, terms),
                revoked_at=None,
                requests_used=0,
                transfer_bytes_used=0,
            )
            body = {
                "kind": RECEIPT_KIND,
                "offer": offer_id,
                "requester": offer.service,
                "requester_cluster_key": offer.peer_cluster_key,
                "service": transport.hypernet_id,
                "service_cluster_key": b64(self._signer.public_key),
                "service_label": self.companion.label,
                "scopes": sorted(offer.scopes),
                "grant": given.id,
                "grant_terms": terms.to_json(),
                "expires_at": given.expires_at.isoformat(),
                "generation": generation,
                "approved_at": now.isoformat(),
            }
            receipt = make_receipt(body, self._signer.sign)
            approved = replace(
                offer,
                project=project,
                state=o.APPROVED,
                revision=offer.revision + 1,
                receipt=receipt,
                peer_id=peer.id,
            )
            await uow.peers.add(peer)
            await uow.grants.add(given)
            await uow.offers.update(approved)
            await self._audit(
                uow,
                principal,
                project,
                "offer.approved",
                offer_id,
                _proven_offerer(offer),
                {"grant": given.id, "peer": peer.id, "receipt": receipt["digest"]},
            )
            await uow.commit()
        self._arm_expiry(given)
        pushed = await self._tell(
            offer.service, "pairing.receipt", {"offer": offer_id, "receipt": receipt}, None
        )
        return {**self._offer_json(approved, now), "receipt_delivered": pushed}

    async def create_grant(
        self, principal: Principal, project: str, peer_id: str, *, grant: object
    ) -> dict[str, Any]:
        principal.require_scope("federation:manage")
        terms = g.parse_grant(grant)
        principal.require_scope(*sorted(terms.scopes))
        now = self._clock()
        async with self._uow_factory() as uow:
            peer = await self._project_peer(uow, project, peer_id)
            if peer.state != p.PAIRED:
                raise Conflict(f"peer {peer_id} is {peer.state}", details={"state": peer.state})
            await self._check_resources(uow, project, terms)
            given = g.Grant(
                id=new_id("grant", secrets.token_bytes(16)),
                project=project,
                peer_id=peer_id,
                terms=terms,
                state=g.ACTIVE,
                created_at=now,
                expires_at=g.expiry_of(now, terms),
                revoked_at=None,
                requests_used=0,
                transfer_bytes_used=0,
            )
            await uow.grants.add(given)
            await self._audit(
                uow, principal, project, "grant.created", given.id, _proven_peer(peer)
            )
            await uow.commit()
        self._arm_expiry(given)
        return self.grant_json(given, now)

    async def revoke_grant(
        self, principal: Principal, project: str, grant_id: str
    ) -> dict[str, Any]:
        principal.require_scope("federation:manage")
        now = self._clock()
        async with self._uow_factory() as uow:
            grant = await self._project_grant(uow, project, grant_id)
            if grant.state_at(now) not in (g.ACTIVE, g.EXPIRED) or grant.state == g.REVOKED:
                raise Conflict(f"grant {grant_id} is {grant.state}", details={"state": grant.state})
            await uow.grants.set_state(grant_id, g.REVOKED, now)
            peer = await uow.peers.get(grant.peer_id)
            await self._audit(
                uow,
                principal,
                project,
                "grant.revoked",
                grant_id,
                None if peer is None else _proven_peer(peer),
            )
            await uow.commit()
        revoked = replace(grant, state=g.REVOKED, revoked_at=now)
        await self._grant_ended(revoked)
        told = False
        if peer is not None and peer.state == p.PAIRED:
            told = await self._tell(peer.hypernet_id, "grant.revoked", {"grant": grant_id}, None)
        return {**self.grant_json(revoked, now), "told": told}

    async def retire_grant(
        self, principal: Principal, project: str, grant_id: str
    ) -> dict[str, Any]:
        """A revoked or expired grant: its operation receipts go, a tombstone stays."""
        principal.require_scope("federation:manage")
        now = self._clock()
        async with self._uow_factory() as uow:
            grant = await self._project_grant(uow, project, grant_id)
            state = grant.state_at(now)
            if state not in (g.REVOKED, g.EXPIRED):
                raise Conflict(
                    f"only a revoked or expired grant can be retired; {grant_id} is {state}",
                    details={"state": state},
                )
            await uow.receipts.delete_scope(grant_scope(grant_id))
            await uow.grants.set_state(grant_id, g.RETIRED, None)
            peer = await uow.peers.get(grant.peer_id)
            await self._audit(
                uow,
                principal,
                project,
                "grant.retired",
                grant_id,
                None if peer is None else _proven_peer(peer),
            )
            await uow.commit()
        if state == g.EXPIRED:
            await self._grant_ended(grant)
        return self.grant_json(replace(grant, state=g.RETIRED), now)

    async def remove_peer(self, principal: Principal, project: str, peer_id: str) -> dict[str, Any]:
        """Revoke every grant given to the peer and remove the pairing, reachable or not."""
        principal.require_scope("federation:manage")
        now = self._clock()
        async with self._uow_factory() as uow:
            peer = await self._project_peer(uow, project, peer_id)
            if peer.state == p.REMOVED:
                raise Conflict(f"peer {peer_id} is removed already", details={"state": peer.state})
            ended = await _revoke_active(uow, peer_id, now)
            removed = replace(peer, state=p.REMOVED, updated_at=now)
            await uow.peers.update(removed)
            await self._audit(
                uow,
                principal,
                project,
                "peer.removed",
                peer_id,
                _proven_peer(peer),
                {"revoked": [grant.id for grant in ended]},
            )
            await uow.commit()
        for grant in ended:
            await self._grant_ended(grant)
        told = False
        if peer.state == p.PAIRED:
            # Told over a session at the pairing's generation, so the peer can prove it is
            # this pairing that ends; only then is the generation forgotten. The peer is
            # already removed in the database, so nothing is served meanwhile.
            told = await self._tell(peer.hypernet_id, "peer.removed", {}, peer.ticket, peer)
        self._remember(removed)
        self._disconnect(peer.hypernet_id)
        async with self._uow_factory() as uow:
            remote = await uow.remote_grants.of_peer(peer_id)
        return {"peer": peer_json(removed, remote), "told": told}

    async def forget_peer(self, principal: Principal, project: str, peer_id: str) -> dict[str, Any]:
        principal.require_scope("federation:manage")
        async with self._uow_factory() as uow:
            peer = await self._project_peer(uow, project, peer_id)
            if peer.state != p.REMOVED:
                raise Conflict(
                    f"peer {peer_id} is {peer.state}; remove it first",
                    details={"state": peer.state},
                )
            grants = await uow.grants.of_peer(peer_id)
            unretired = [grant.id for grant in grants if grant.state != g.RETIRED]
            if unretired:
                raise Conflict(
                    f"retire the grants of this peer first: {', '.join(unretired)}",
                    details={"grants": unretired},
                )
            for offer in await uow.offers.of_peer(peer_id):
                await uow.offers.delete(offer.id)
            await uow.remote_grants.delete_for_peer(peer_id)
            await self._delete_grants(uow, grants)
            await uow.peers.delete(peer_id)
            await self._audit(
                uow, principal, project, "peer.forgotten", peer_id, _proven_peer(peer)
            )
            await uow.commit()
        self._disconnect(peer.hypernet_id)
        return {"peer": peer_id, "forgotten": True}

    async def _delete_grants(self, uow: UnitOfWork, grants: list[g.Grant]) -> None:
        for grant in grants:
            await uow.grants.delete(grant.id)

    async def _drop_pending_peer(self, uow: UnitOfWork, offer: o.Offer, now: datetime) -> None:
        """A discarded approved offer: its unfinished peer goes and its grant is revoked."""
        if offer.peer_id is None:
            return
        peer = await uow.peers.get(offer.peer_id)
        if peer is not None and peer.state == p.PENDING:
            await uow.peers.update(replace(peer, state=p.REMOVED, updated_at=now))
            await _revoke_active(uow, peer.id, now)

    async def _refuse_second_pairing(self, uow: UnitOfWork, hypernet_id: str) -> None:
        """One pairing per other cluster: its generation binds every session with it, so a
        second pairing would silently end the first. Further grants go on the paired peer."""
        for peer in await uow.peers.by_hypernet_id(hypernet_id):
            if peer.state == p.PAIRED:
                raise Conflict(
                    f"this cluster is already paired with {hypernet_id} as peer {peer.id}"
                    f" (project {peer.project}); give further grants there, or remove that"
                    " peer first",
                    details={"peer": peer.id, "project": peer.project},
                )

    async def _check_resources(self, uow: UnitOfWork, project: str, terms: g.GrantTerms) -> None:
        """Exact IDs of this project's services and models, and of this cluster's nodes."""
        for index, service_id in enumerate(sorted(terms.services)):
            service = await uow.services.get(service_id)
            if service is None or service.project != project:
                raise InvalidInput(
                    f"grant.services[{index}] is not a service of project {project}",
                    field=f"grant.services[{index}]",
                )
        for index, model_id in enumerate(sorted(terms.models)):
            model = await uow.models.get(model_id)
            if model is None or model.project != project:
                raise InvalidInput(
                    f"grant.models[{index}] is not a model of project {project}",
                    field=f"grant.models[{index}]",
                )
        for index, node_id in enumerate(sorted(terms.nodes)):
            if await uow.nodes.get(node_id) is None:
                raise InvalidInput(
                    f"grant.nodes[{index}] is not a node of this cluster",
                    field=f"grant.nodes[{index}]",
                )

    async def _grant_ended(self, grant: g.Grant) -> None:
        """Revocation, expiry, removal: cancel what runs under the grant, then the hooks."""
        reason: FiccError = (
            GrantExpired("the grant expired", details={"grant": grant.id})
            if grant.state == g.EXPIRED
            else GrantRevoked("the grant was revoked", details={"grant": grant.id})
        )
        self._disarm_expiry(grant.id)
        self.slots.end_all(grant.id, reason)
        for hook in self.on_grant_ended:
            try:
                await hook(grant)
            except FiccError as exc:
                log.warning("after grant %s ended: %s", grant.id, exc.message)

    def _arm_expiry(self, grant: g.Grant) -> None:
        """At ``expires_at`` an active grant ends as if revoked: by a timer, not on next use.

        So a grant that nobody uses again still stops its ``stop_on_revoke`` services on time.
        """
        self._disarm_expiry(grant.id)
        if grant.state != g.ACTIVE:
            return
        delay = max((grant.expires_at - self._clock()).total_seconds(), 0.0)
        loop = asyncio.get_running_loop()
        self._expiry_timers[grant.id] = loop.call_later(delay, self._expiry_due, grant.id)

    def _disarm_expiry(self, grant_id: str) -> None:
        timer = self._expiry_timers.pop(grant_id, None)
        if timer is not None:
            timer.cancel()

    def _expiry_due(self, grant_id: str) -> None:
        self._expiry_timers.pop(grant_id, None)
        task = asyncio.get_running_loop().create_task(self._expire(grant_id))
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self, grant_id: str) -> None:
        """Mark the grant expired, then end it the way revocation does (slots, services)."""
        now = self._clock()
        try:
            async with self._uow_factory() as uow:
                grant = await uow.grants.get(grant_id)
                if grant is None or grant.state != g.ACTIVE:
                    return  # revoked, retired or forgotten meanwhile: ended by that path
                if grant.state_at(now) != g.EXPIRED:
                    self._arm_expiry(grant)  # the timer ran early by the clock: wait again
                    return
                await uow.grants.set_state(grant_id, g.EXPIRED, None)
                await audit.record(
                    uow,
                    self._clock,
                    action="grant.expired",
                    actor="lifetime",
                    project=grant.project,
                    target=grant_id,
                    details={"expires_at": grant.expires_at.isoformat()},
                )
                await uow.commit()
        except FiccError as exc:
            log.warning("grant %s could not be expired: %s", grant_id, exc.message)
            return
        await self._grant_ended(replace(grant, state=g.EXPIRED))

    def _disconnect(self, hypernet_id: str) -> None:
        """Close the sessions with a cluster whose pairing ended, and what runs on them."""
        try:
            transport = self.companion.transport
        except Unavailable:
            return  # no companion, no session
        transport.disconnect(
            hypernet_id, PermissionDenied("the pairing with this cluster was removed")
        )

    async def _tell(
        self,
        hypernet_id: str,
        operation: str,
        body: Mapping[str, Any],
        ticket: str | None,
        peer: p.Peer | None = None,
    ) -> bool:
        """Best effort: True if the peer acknowledged."""
        try:
            transport = self.companion.transport
            await transport.request(
                hypernet_id, operation, body, ticket=ticket, timeout_seconds=NOTICE_TIMEOUT_SECONDS
            )
        except FiccError as exc:
            log.info("could not tell %s (%s): %s", hypernet_id, operation, exc.message)
            return False
        return True

    async def _audit(
        self,
        uow: UnitOfWork,
        principal: Principal | None,
        project: str | None,
        action: str,
        target: str,
        identity: PeerIdentity | None,
        details: dict[str, Any] | None = None,
    ) -> None:
        await audit.record(
            uow,
            self._clock,
            action=action,
            actor="peer" if principal is None else audit.actor_of(principal),
            project=project,
            target=target,
            details=details,
            peer_hypernet_id=None if identity is None else identity.hypernet_id,
            peer_cluster_key=None if identity is None else b64(identity.cluster_key),
        )

    # --- what the other side asks of us ---------------------------------------------------------

    async def _on_offer(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        """Record an offer from a cluster without a pairing: bounded per HyperNet ID and in
        total, and never under an ID used before; a refusal writes nothing."""
        offer_id = parse_id("offer", body.get("offer"), field="offer")
        requested = parse_scopes(body.get("scopes"), allowed=REMOTE_SCOPES)
        await self.purge_offers()
        now = self._clock()
        async with self._uow_factory() as uow:
            existing = await uow.offers.get(offer_id)
            if existing is not None:
                if existing.service != identity.hypernet_id:
                    raise Conflict("an offer with this ID exists")
                return {"offer": offer_id, "label": self.companion.label}
            if await uow.offers.ever_used(offer_id):
                raise Conflict(
                    "an offer ID is never reused; send a new offer", details={"offer": offer_id}
                )
            await _check_offer_room(uow, identity.hypernet_id, now)
            offer = o.Offer(
                id=offer_id,
                direction=o.INCOMING,
                project=None,
                service=identity.hypernet_id,
                peer_label=o.clean_label(body.get("label")),
                peer_cluster_key=b64(identity.cluster_key),
                scopes=requested,
                state=o.RECEIVED,
                revision=1,
                receipt=None,
                ticket=None,
                created_at=now,
                expires_at=o.expiry(now),
            )
            await uow.offers.add(offer)
            await self._audit(uow, None, None, "offer.received", offer_id, identity)
            await uow.commit()
        return {"offer": offer_id, "label": self.companion.label}

    async def _their_offer(
        self, uow: UnitOfWork, identity: PeerIdentity, body: dict[str, Any], direction: str
    ) -> o.Offer:
        offer_id = parse_id("offer", body.get("offer"), field="offer")
        offer = await uow.offers.get(offer_id)
        if (
            offer is None
            or offer.direction != direction
            or offer.service != identity.hypernet_id
            or offer.peer_cluster_key != b64(identity.cluster_key)
        ):
            raise NotFound(f"no offer {offer_id} with this peer", details={"offer": offer_id})
        return offer

    async def _on_receipt(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        receipt = body.get("receipt")
        transport = self.companion.transport
        async with self._uow_factory() as uow:
            offer = await self._their_offer(uow, identity, body, o.OUTGOING)
            digest = receipt.get("digest") if isinstance(receipt, dict) else None
            check_receipt(
                receipt,
                digest=str(digest),
                offer_id=offer.id,
                requester_hypernet_id=transport.hypernet_id,
                requester_cluster_key=b64(self._signer.public_key),
                service_hypernet_id=identity.hypernet_id,
                service_cluster_key=identity.cluster_key,
                requested_scopes=offer.scopes,
                verify=self._verify,
            )
            state = o.next_state(offer, "receipt", self._clock())
            assert isinstance(receipt, dict)
            await uow.offers.update(
                replace(offer, state=state, revision=offer.revision + 1, receipt=receipt)
            )
            await self._audit(uow, None, offer.project, "receipt.received", offer.id, identity)
            await uow.commit()
        return {}

    async def _on_fetch(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        async with self._uow_factory() as uow:
            offer = await self._their_offer(uow, identity, body, o.INCOMING)
        if offer.receipt is None or offer.state_at(self._clock()) != o.APPROVED:
            raise Conflict(
                "the offer has no receipt to fetch",
                details={"state": offer.state_at(self._clock())},
            )
        return {"receipt": offer.receipt}

    async def _on_finish(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        now = self._clock()
        async with self._uow_factory() as uow:
            offer = await self._their_offer(uow, identity, body, o.INCOMING)
            o.next_state(offer, "finish", now)
            if offer.receipt is None or body.get("receipt") != offer.receipt.get("digest"):
                raise Conflict("that is not the receipt of this offer")
            assert offer.peer_id is not None
            peer = await uow.peers.get(offer.peer_id)
            if peer is None or peer.state != p.PENDING:
                raise Conflict("the pairing of this offer is gone")
            await self._refuse_second_pairing(uow, identity.hypernet_id)
            paired = replace(peer, state=p.PAIRED, updated_at=now)
            await uow.peers.update(paired)
            await uow.offers.update(replace(offer, state=o.FINISHED, revision=offer.revision + 1))
            await self._audit(
                uow, None, offer.project, "pairing.finished", peer.id, identity, {"offer": offer.id}
            )
            await uow.commit()
        self._remember(paired)
        return {"peer": paired.id}

    async def _on_discard(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        now = self._clock()
        async with self._uow_factory() as uow:
            offer_id = parse_id("offer", body.get("offer"), field="offer")
            offer = await uow.offers.get(offer_id)
            if (
                offer is None
                or offer.service != identity.hypernet_id
                or offer.peer_cluster_key != b64(identity.cluster_key)
            ):
                raise NotFound(f"no offer {offer_id} with this peer", details={"offer": offer_id})
            if offer.state_at(now) in o.OPEN_STATES:
                await uow.offers.update(
                    replace(offer, state=o.DISCARDED, revision=offer.revision + 1)
                )
                await self._drop_pending_peer(uow, offer, now)
                await self._audit(uow, None, offer.project, "offer.discarded", offer_id, identity)
                await uow.commit()
        return {}

    async def _on_peer_removed(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        now = self._clock()
        async with self._uow_factory() as uow:
            peer = await self.paired_peer(uow, identity)
            removed = replace(peer, state=p.REMOVED, updated_at=now)
            await uow.peers.update(removed)
            remote = await uow.remote_grants.of_peer(peer.id)
            await uow.remote_grants.replace_for_peer(
                peer.id, [{**item, "state": g.REVOKED} for item in remote], now
            )
            ended = await _revoke_active(uow, peer.id, now)
            await self._audit(uow, None, peer.project, "peer.removed_by_peer", peer.id, identity)
            await uow.commit()
        self._remember(removed)
        for grant in ended:
            await self._grant_ended(grant)
        return {}

    async def _on_grant_revoked(
        self, identity: PeerIdentity, body: dict[str, Any]
    ) -> RequestResult:
        grant_id = parse_id("grant", body.get("grant"), field="grant")
        now = self._clock()
        async with self._uow_factory() as uow:
            peer = await self.paired_peer(uow, identity)
            remote = await uow.remote_grants.of_peer(peer.id)
            await uow.remote_grants.replace_for_peer(
                peer.id,
                [
                    {**item, "state": g.REVOKED} if item["id"] == grant_id else item
                    for item in remote
                ],
                now,
            )
            await self._audit(uow, None, peer.project, "remote_grant.revoked", grant_id, identity)
            await uow.commit()
        return {}

    async def _on_grants_list(self, identity: PeerIdentity, body: dict[str, Any]) -> RequestResult:
        now = self._clock()
        async with self._uow_factory() as uow:
            peer = await self.paired_peer(uow, identity)
            grants = await uow.grants.of_peer(peer.id)
        return {
            "grants": [
                with_times_formatted(self.grant_json(grant, now))
                for grant in grants
                if grant.state != g.RETIRED
            ]
        }


async def _revoke_active(uow: UnitOfWork, peer_id: str, now: datetime) -> list[g.Grant]:
    """Revoke every active grant given to a peer; the grants as they are now."""
    ended = []
    for grant in await uow.grants.of_peer(peer_id):
        if grant.state == g.ACTIVE:
            await uow.grants.set_state(grant.id, g.REVOKED, now)
            ended.append(replace(grant, state=g.REVOKED, revoked_at=now))
    return ended


def grant_scope(grant_id: str) -> str:
    """The mutation-receipt scope of a grant's remote mutations."""
    return f"grant:{grant_id}"


def _proven_peer(peer: p.Peer) -> PeerIdentity:
    """The identity a peer proved when it paired: HyperNet ID, cluster key, generation."""
    return PeerIdentity(peer.hypernet_id, unb64(peer.cluster_key), peer.generation)


def _proven_offerer(offer: o.Offer) -> PeerIdentity | None:
    """The identity the other side of an offer proved in the session that carried it."""
    if offer.peer_cluster_key is None:
        return None
    return PeerIdentity(offer.service, unb64(offer.peer_cluster_key), 0)


async def _check_offer_room(uow: UnitOfWork, hypernet_id: str, now: datetime) -> None:
    """LimitExceeded when the sender, or everyone together, has too many offers waiting."""
    waiting = await uow.offers.count_received(now=now, service=hypernet_id)
    if waiting >= o.MAX_RECEIVED_OFFERS_PER_HYPERNET_ID:
        raise LimitExceeded(
            f"this cluster already has {waiting} offers of yours waiting for approval",
            details={
                "limit": "offers_per_hypernet_id",
                "max": o.MAX_RECEIVED_OFFERS_PER_HYPERNET_ID,
            },
        )
    if await uow.offers.count_received(now=now) >= o.MAX_RECEIVED_OFFERS:
        raise LimitExceeded(
            "this cluster has too many offers waiting for approval; try again later",
            details={"limit": "offers_waiting", "max": o.MAX_RECEIVED_OFFERS},
        )


def peer_json(peer: p.Peer, remote_grants: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": peer.id,
        "label": peer.label,
        "hypernet_id": peer.hypernet_id,
        "cluster_key": peer.cluster_key,
        "state": peer.state,
        "role": peer.role,
        "generation": peer.generation,
        "remote_grants": remote_grants,
        "selected": peer.selected_grant,
        "created_at": peer.created_at,
        "updated_at": peer.updated_at,
    }
