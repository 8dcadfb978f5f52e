"""What the federation's services share: the cluster's signer, lookups scoped to a project,
the proven identities the audit log records, and the checks pairing and grants both make."""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol

from ficc.base.errors import Conflict, FiccError, InvalidInput, NotFound
from ficc.base.ids import new_id
from ficc.base.json_types import JSONObject
from ficc.base.units import KiB, MiB
from ficc.domain.grants import Grant, GrantState, GrantTerms
from ficc.domain.offers import Offer, OfferView
from ficc.domain.peers import Peer, PeerRole, PeerState, PeerView
from ficc.domain.principals import Principal
from ficc.domain.receipts import b64, unb64
from ficc.domain.remote_grants import RemoteGrant
from ficc.services import audit
from ficc.services.federation.known_peers import KnownPeers
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory
from ficc.services.ports.peers import PeerIdentity, PeerLink

log = logging.getLogger("ficc.federation")

PAIRING_TIMEOUT_SECONDS: Final = 10.0
NOTICE_TIMEOUT_SECONDS: Final = 3.0
NOTICE_ANSWER_BYTES: Final = 4 * KiB
"""The most a notice (``peer.removed``, ``grant.revoked``, ``pairing.receipt``) may be answered
with: they answer ``{}``. Pairing operations before a pairing take at most 64 KiB."""
GRANTS_LIST_ANSWER_BYTES: Final = 4 * MiB
"""The most a ``grants.list`` answer may be: about 1 KiB a grant."""
HYPERNET_ID: Final = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ClusterSigner:
    public_key: bytes
    sign: Callable[[bytes], bytes]


Verify = Callable[[bytes, bytes, bytes], bool]


@dataclass(frozen=True)
class FederationContext:
    """What every federation service works with: the database, the clock, the channel to the
    other clusters, and the paired peers the handshake knows."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    link: PeerLink
    known: KnownPeers

    @contextlib.asynccontextmanager
    async def managing(self, principal: Principal) -> AsyncIterator[tuple[UnitOfWork, datetime]]:
        """The opening of an owner's change to a pairing or grant: ``federation:manage``
        required, the one time the change happens at, and the transaction it runs in."""
        principal.require_scope("federation:manage")
        now = self.clock()
        async with self.uow_factory() as uow:
            yield uow, now

    async def audit(
        self,
        uow: UnitOfWork,
        actor: Principal | None,
        project: str | None,
        action: str,
        target: str,
        about: Peer | Offer | PeerIdentity | None,
        details: JSONObject | None = None,
    ) -> None:
        """An audit entry of the federation: the actor, or ``peer``, with the identity ``about``
        proves: a peer's pairing, the session an offer came in, or the session at hand."""
        identity = _proven(about)
        await audit.record(
            uow,
            self.clock,
            action=action,
            actor="peer" if actor is None else audit.actor_of(actor),
            project=project,
            target=target,
            details=details,
            peer_hypernet_id=None if identity is None else identity.hypernet_id,
            peer_cluster_key=None if identity is None else b64(identity.cluster_key),
        )


def parse_hypernet_id(value: object, *, field: str = "service") -> str:
    if not isinstance(value, str) or not HYPERNET_ID.match(value):
        raise InvalidInput(f"{field} must be a HyperNet ID (64 lowercase hex)", field=field)
    return value


async def tell(
    link: PeerLink,
    hypernet_id: str,
    operation: str,
    body: Mapping[str, object],
    ticket: str | None,
    *,
    generation: int = 0,
) -> bool:
    """Best effort: True if the peer acknowledged. ``generation``: the pairing it concerns
    (0: a pairing operation)."""
    try:
        await link.request(
            hypernet_id,
            operation,
            body,
            generation=generation,
            ticket=ticket,
            timeout_seconds=NOTICE_TIMEOUT_SECONDS,
            max_answer_bytes=NOTICE_ANSWER_BYTES,
        )
    except FiccError as exc:
        log.info("could not tell %s (%s): %s", hypernet_id, operation, exc.message)
        return False
    return True


async def visible_offer(uow: UnitOfWork, project: str, offer_id: str) -> Offer:
    offer = await uow.offers.get(offer_id)
    if offer is None or offer.project not in (None, project):
        raise NotFound(f"no offer {offer_id}", details={"offer": offer_id})
    return offer


async def project_peer(uow: UnitOfWork, project: str, peer_id: str) -> Peer:
    peer = await uow.peers.get(peer_id)
    if peer is None or peer.project != project:
        raise NotFound(f"no peer {peer_id} in project {project}", details={"peer": peer_id})
    return peer


def check_paired(peer: Peer) -> None:
    """Refuse what only a live pairing may do: a pending or removed peer is a conflict."""
    if peer.state != PeerState.PAIRED:
        raise Conflict(f"peer {peer.id} is {peer.state}", details={"state": peer.state})


async def project_grant(uow: UnitOfWork, project: str, grant_id: str) -> Grant:
    grant = await uow.grants.get(grant_id)
    if grant is None or grant.project != project:
        raise NotFound(f"no grant {grant_id} in project {project}", details={"grant": grant_id})
    return grant


async def end_pairing(uow: UnitOfWork, peer: Peer, now: datetime) -> tuple[Peer, list[Grant]]:
    """Mark the peer removed and revoke every active grant given to it, in the caller's
    transaction, whichever side ends the pairing; the peer and those grants as they are now."""
    removed = replace(peer, state=PeerState.REMOVED, updated_at=now)
    await uow.peers.update(removed)
    ended = []
    for grant in await uow.grants.of_peer(peer.id):
        if grant.state == GrantState.ACTIVE:
            await uow.grants.set_state(grant.id, GrantState.REVOKED, now)
            ended.append(replace(grant, state=GrantState.REVOKED, revoked_at=now))
    return removed, ended


async def refuse_second_pairing(uow: UnitOfWork, hypernet_id: str, project: str) -> None:
    """One pairing per project and other cluster (each project of either cluster pairs on its
    own, at its own generation). Further grants go on the paired peer."""
    for peer in await uow.peers.by_hypernet_id(hypernet_id):
        if peer.state == PeerState.PAIRED and peer.project == project:
            raise Conflict(
                f"project {project} is already paired with {hypernet_id} as peer {peer.id};"
                " give further grants there, or remove that peer first",
                details={"peer": peer.id, "project": peer.project},
            )


class _Owned(Protocol):
    @property
    def project(self) -> str: ...


async def check_resources(uow: UnitOfWork, project: str, terms: GrantTerms) -> None:
    """Exact IDs of this project's services and models, and of this cluster's nodes."""
    owned: list[tuple[str, frozenset[str], Callable[[str], Awaitable[_Owned | None]]]] = [
        ("service", terms.services, uow.services.get),
        ("model", terms.models, uow.models.get),
    ]
    for kind, ids, get in owned:
        for index, resource_id in enumerate(sorted(ids)):
            record = await get(resource_id)
            if record is None or record.project != project:
                raise InvalidInput(
                    f"grant.{kind}s[{index}] is not a {kind} of project {project}",
                    field=f"grant.{kind}s[{index}]",
                )
    for index, node_id in enumerate(sorted(terms.nodes)):
        if await uow.nodes.get(node_id) is None:
            raise InvalidInput(
                f"grant.nodes[{index}] is not a node of this cluster",
                field=f"grant.nodes[{index}]",
            )


def pending_peer(
    offer: Offer,
    project: str,
    role: PeerRole,
    generation: int,
    now: datetime,
    *,
    selected_grant: str | None = None,
) -> Peer:
    """The peer an offer's pairing makes, pending until the pairing finishes; the requester
    keeps the offer's ticket to reach the service's cluster again."""
    assert offer.peer_cluster_key is not None
    return Peer(
        id=new_id("peer", secrets.token_bytes(16)),
        project=project,
        label=offer.peer_label,
        hypernet_id=offer.other_hypernet_id,
        cluster_key=offer.peer_cluster_key,
        state=PeerState.PENDING,
        generation=generation,
        role=role,
        offer_id=offer.id,
        selected_grant=selected_grant,
        ticket=offer.ticket if role == PeerRole.REQUESTER else None,
        created_at=now,
        updated_at=now,
    )


def _proven(about: Peer | Offer | PeerIdentity | None) -> PeerIdentity | None:
    """The identity a peer proved when it paired (HyperNet ID, cluster key, generation), or
    the other side of an offer in the session that carried it."""
    if isinstance(about, Peer):
        return PeerIdentity(about.hypernet_id, unb64(about.cluster_key), about.generation)
    if isinstance(about, Offer):
        if about.peer_cluster_key is None:
            return None
        return PeerIdentity(about.other_hypernet_id, unb64(about.peer_cluster_key), 0)
    return about


def view_of_peer(peer: Peer, copies: Iterable[Mapping[str, object]]) -> PeerView:
    """A peer with its copies of the grants it gives us, each as the peer listed it."""
    return PeerView.of(peer, (RemoteGrant.of(copy) for copy in copies))


def view_of_offer(offer: Offer, now: datetime, link: PeerLink) -> OfferView:
    """An offer from this cluster's side, which the link names (no name: no companion)."""
    return OfferView.of(offer, now, my_hypernet_id(link))


def my_hypernet_id(link: PeerLink) -> str | None:
    """This cluster's HyperNet ID, or None while no companion runs."""
    try:
        return link.hypernet_id
    except FiccError:
        return None
