"""Ending a pairing: remove a peer (revoking what it was given), forget a removed one, and
hear that the other side removed us."""

from __future__ import annotations

from dataclasses import dataclass

from ficc.base.errors import Conflict, PermissionDenied
from ficc.base.json_types import JSONObject
from ficc.domain.grants import GrantState
from ficc.domain.peers import ForgottenPeerView, Peer, PeerState, RemovedPeerView
from ficc.domain.principals import Principal
from ficc.services.federation.common import (
    FederationContext,
    end_pairing,
    project_peer,
    tell,
    view_of_peer,
)
from ficc.services.federation.grants import Grants
from ficc.services.federation.known_peers import paired_peer
from ficc.services.ports.peers import PeerIdentity, RequestResult


@dataclass(frozen=True, eq=False)
class Peers:
    """The end of pairings, on either side's initiative."""

    context: FederationContext
    grants: Grants

    async def remove_peer(
        self, principal: Principal, project: str, peer_id: str
    ) -> RemovedPeerView:
        """Revoke every grant given to the peer and remove the pairing, reachable or not."""
        async with self.context.managing(principal) as (uow, now):
            peer = await project_peer(uow, project, peer_id)
            if peer.state == PeerState.REMOVED:
                raise Conflict(f"peer {peer_id} is removed already", details={"state": peer.state})
            removed, ended = await end_pairing(uow, peer, now)
            await self.context.audit(
                uow,
                principal,
                project,
                "peer.removed",
                peer_id,
                peer,
                {"revoked": [grant.id for grant in ended]},
            )
            await uow.commit()
        for grant in ended:
            await self.grants.grant_ended(grant)
        told = False
        if peer.state == PeerState.PAIRED:
            # Told over a session at the pairing's generation, so the peer can prove it is
            # this pairing that ends; only then is the generation forgotten. The peer is
            # already removed in the database, so nothing is served meanwhile.
            told = await tell(
                self.context.link,
                peer.hypernet_id,
                "peer.removed",
                {},
                peer.ticket,
                generation=peer.generation,
            )
        self.context.known.remember(removed)
        self._disconnect(peer)
        async with self.context.uow_factory() as uow:
            remote = await uow.remote_grants.of_peer(peer_id)
        return RemovedPeerView(view_of_peer(removed, remote), told)

    async def forget_peer(
        self, principal: Principal, project: str, peer_id: str, *, erase_audit: bool = False
    ) -> ForgottenPeerView:
        """Delete a removed peer whose grants are all retired, with its offers and grants.

        The audit log keeps the pairing's history; with ``erase_audit`` the rows naming the
        peer, its offers and its grants become signed tombstones instead (their content goes,
        their digests stay, so the chain still verifies, and ``peer.forgotten`` lists them).
        """
        principal.require_scope("federation:manage")
        async with self.context.uow_factory() as uow:
            peer = await project_peer(uow, project, peer_id)
            if peer.state != PeerState.REMOVED:
                raise Conflict(
                    f"peer {peer_id} is {peer.state}; remove it first",
                    details={"state": peer.state},
                )
            grants = await uow.grants.of_peer(peer_id)
            unretired = [grant.id for grant in grants if grant.state != GrantState.RETIRED]
            if unretired:
                raise Conflict(
                    f"retire the grants of this peer first: {', '.join(unretired)}",
                    details={"grants": unretired},
                )
            offers = await uow.offers.of_peer(peer_id)
            for offer in offers:
                await uow.offers.delete(offer.id)
            await uow.remote_grants.delete_for_peer(peer_id)
            for grant in grants:
                await uow.grants.delete(grant.id)
            await uow.peers.delete(peer_id)
            details: JSONObject = {}
            tombstoned: list[int] = []
            if erase_audit:
                # What the peer did to this cluster's services and models (other targets)
                # stays in the log either way.
                named = [peer_id, *(grant.id for grant in grants), *(o.id for o in offers)]
                seqs = await uow.audit.naming(project, named)
                tombstoned = list(await uow.audit.tombstone(seqs, self.context.clock()))
                details["tombstoned"] = tombstoned
            await self.context.audit(
                uow, principal, project, "peer.forgotten", peer_id, peer, details
            )
            await uow.commit()
        self._disconnect(peer)
        answer: ForgottenPeerView = {"peer": peer_id, "forgotten": True}
        if erase_audit:
            answer["tombstoned"] = tombstoned
        return answer

    async def on_peer_removed(self, identity: PeerIdentity, body: JSONObject) -> RequestResult:
        now = self.context.clock()
        async with self.context.uow_factory() as uow:
            peer = await paired_peer(uow, identity)
            removed, ended = await end_pairing(uow, peer, now)
            remote = await uow.remote_grants.of_peer(peer.id)
            await uow.remote_grants.replace_for_peer(
                peer.id, [{**item, "state": GrantState.REVOKED} for item in remote], now
            )
            await self.context.audit(
                uow, None, peer.project, "peer.removed_by_peer", peer.id, identity
            )
            await uow.commit()
        self.context.known.remember(removed)
        for grant in ended:
            await self.grants.grant_ended(grant)
        return {}

    def _disconnect(self, peer: Peer) -> None:
        """Close the sessions of a pairing that ended, and what runs on them (the cluster's
        other pairings, with other projects, keep theirs)."""
        self.context.link.disconnect(
            peer.hypernet_id,
            peer.generation,
            PermissionDenied("the pairing with this cluster was removed"),
        )
