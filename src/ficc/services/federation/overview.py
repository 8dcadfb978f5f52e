"""A project's federation at a glance: companion, identity, peers, offers, grants, transfers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ficc.base.errors import InvalidInput
from ficc.base.ids import parse_id
from ficc.domain.grant_views import GrantView
from ficc.domain.offers import DEFAULT_OFFERS_PAGE, MAX_OFFERS_PAGE, OfferView
from ficc.domain.peers import PeerView
from ficc.domain.transfers import TransferView
from ficc.services.companion import Companion, CompanionView, IdentityView
from ficc.services.federation.grants import Grants
from ficc.services.federation.remote_grants import RemoteGrantCopies
from ficc.services.ports import Clock, UnitOfWorkFactory

TransfersOf = Callable[[str], Awaitable[list[TransferView]]]
"""The transfers of a project, as the overview lists them."""


@dataclass(frozen=True, slots=True)
class FederationView:
    """What ``GET /api/v1/federation`` shows of a project; ``offers_next`` names the last
    offer shown when more follow."""

    companion: CompanionView
    identity: IdentityView
    project: str
    peers: tuple[PeerView, ...]
    offers: tuple[OfferView, ...]
    offers_next: str | None
    grants: tuple[GrantView, ...]
    transfers: tuple[TransferView, ...]


@dataclass(frozen=True, eq=False)
class Overview:
    """Reads only: what ``GET /api/v1/federation`` shows."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    companion: Companion
    grants: Grants
    copies: RemoteGrantCopies
    transfers_of: TransfersOf

    async def overview(
        self,
        project: str,
        *,
        offers_after: str | None = None,
        offers_limit: int = DEFAULT_OFFERS_PAGE,
    ) -> FederationView:
        """The project's federation; offers a page at a time, oldest first: ``offers_next``
        names the last one shown when more follow (pass it as ``offers_after``)."""
        now = self.clock()
        if offers_after is not None:
            offers_after = parse_id("offer", offers_after, field="offers_after")
        if isinstance(offers_limit, bool) or not 1 <= offers_limit <= MAX_OFFERS_PAGE:
            raise InvalidInput(
                f"offers_limit must be an integer from 1 to {MAX_OFFERS_PAGE}",
                field="offers_limit",
            )
        async with self.uow_factory() as uow:
            peers = await uow.peers.in_project(project)
            offers = await uow.offers.visible_to(
                project, after=offers_after, limit=offers_limit + 1
            )
            grants = await uow.grants.in_project(project)
            kept = {peer.id: await uow.remote_grants.of_peer(peer.id) for peer in peers}
        remote = {peer.id: await self.copies.current(peer, kept[peer.id]) for peer in peers}
        identity = self.companion.identity_json()
        me = identity["hypernet_id"]
        return FederationView(
            companion=self.companion.companion_json(),
            identity=identity,
            project=project,
            peers=tuple(PeerView.of(peer, remote[peer.id]) for peer in peers),
            offers=tuple(OfferView.of(offer, now, me) for offer in offers[:offers_limit]),
            offers_next=offers[offers_limit - 1].id if len(offers) > offers_limit else None,
            grants=tuple(self.grants.view(grant, now) for grant in grants),
            transfers=tuple(await self.transfers_of(project)),
        )
