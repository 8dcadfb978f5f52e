"""The paired peers the transport's handshake looks up, and the proof that a session is one."""

from __future__ import annotations

from ficc.base.errors import PermissionDenied
from ficc.domain.grants import Grant, wire_bytes
from ficc.domain.peers import Peer, PeerState
from ficc.domain.receipts import unb64
from ficc.protocol.handshake import KnownPeer
from ficc.services.ports import UnitOfWork, UnitOfWorkFactory
from ficc.services.ports.peers import PeerIdentity


class KnownPeers:
    """A memory of every pairing's cluster key and generation by HyperNet ID, kept with the
    database (one cluster may be paired with several projects, each at its own generation).

    The handshake of every session reads it, so it must not cost a transaction.
    """

    def __init__(self, uow_factory: UnitOfWorkFactory) -> None:
        self._uow_factory = uow_factory
        self._known: dict[str, dict[int, KnownPeer]] = {}
        self._peer_ids: dict[tuple[str, int], str] = {}
        self._request_bytes: dict[str, dict[str, int]] = {}
        """By peer ID: the ``request_bytes`` of each live grant given to it."""

    async def load(self) -> list[Peer]:
        """Fill the memory from the database; every peer of every project, for the caller."""
        async with self._uow_factory() as uow:
            projects = [name for name, _ in await uow.projects.list()]
            peers = [peer for name in projects for peer in await uow.peers.in_project(name)]
        self._known = {}
        self._peer_ids = {}
        for peer in peers:
            self.remember(peer)
        return peers

    async def lookup(self, hypernet_id: str) -> tuple[KnownPeer, ...]:
        """The pairings recorded with ``hypernet_id``; empty if none."""
        return tuple(self._known.get(hypernet_id, {}).values())

    def knows(self, identity: PeerIdentity) -> bool:
        """Whether a session's identity is one of a pairing (generation and key recorded)."""
        known = self._known.get(identity.hypernet_id, {}).get(identity.generation)
        return known is not None and known.cluster_key == identity.cluster_key

    def remember(self, peer: Peer) -> None:
        """After a peer's state changed: a paired peer is known, an ended pairing is not."""
        pairings = self._known.setdefault(peer.hypernet_id, {})
        if peer.state == PeerState.PAIRED:
            pairings[peer.generation] = KnownPeer(unb64(peer.cluster_key), peer.generation)
            self._peer_ids[peer.hypernet_id, peer.generation] = peer.id
        else:
            pairings.pop(peer.generation, None)
            self._peer_ids.pop((peer.hypernet_id, peer.generation), None)
        if not pairings:
            del self._known[peer.hypernet_id]

    def granted(self, grant: Grant) -> None:
        """A grant was given (or loaded): its peer may send bodies up to its size."""
        self._request_bytes.setdefault(grant.peer_id, {})[grant.id] = grant.terms.request_bytes

    def grant_ended(self, grant: Grant) -> None:
        """A grant ended: its size no longer counts."""
        sizes = self._request_bytes.get(grant.peer_id, {})
        sizes.pop(grant.id, None)
        if not sizes:
            self._request_bytes.pop(grant.peer_id, None)

    def body_bound(self, identity: PeerIdentity) -> int:
        """The largest body a session of ``identity`` may send after a request now (the
        transport's :data:`~ficc.services.ports.peers.BodyBound`): what the largest
        ``request_bytes`` of the pairing's live grants may take on the wire, or nothing."""
        peer_id = self._peer_ids.get((identity.hypernet_id, identity.generation))
        sizes = None if peer_id is None else self._request_bytes.get(peer_id)
        if not self.knows(identity) or not sizes:
            return 0
        return wire_bytes(max(sizes.values()))


async def paired_peer(uow: UnitOfWork, identity: PeerIdentity) -> Peer:
    """The peer this session proves to be, paired at the session's generation."""
    for peer in await uow.peers.by_hypernet_id(identity.hypernet_id):
        if (
            peer.state == PeerState.PAIRED
            and peer.generation == identity.generation
            and unb64(peer.cluster_key) == identity.cluster_key
        ):
            return peer
    raise PermissionDenied(
        "this cluster has no pairing with the requesting peer at this generation",
        details={"reason": "not_paired"},
    )
