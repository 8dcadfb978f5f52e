"""The requester's receipt chains behave alike in the fake and in SQL: gaps are noted by
grant with the lowest seq to fetch after, forgotten once caught up (not a row that only says
which peer gave a grant), and a peer's grants are listed once each."""

from __future__ import annotations

from tests.unit.contracts.records import fresh

from ficc.services.ports import UnitOfWorkFactory


async def test_gaps_are_kept_by_grant_at_their_lowest_seq_until_caught_up(
    uow_factory: UnitOfWorkFactory,
) -> None:
    grant, other, peer = fresh("grant"), fresh("grant"), fresh("peer")
    async with uow_factory() as uow:
        assert await uow.receipt_chains.behind() == {}
        await uow.receipt_chains.note(grant, peer, 4)
        await uow.receipt_chains.note(grant, peer, 2)
        await uow.receipt_chains.note(grant, peer, 7)
        await uow.receipt_chains.note(other, peer, None)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.receipt_chains.behind() == {grant: 2}
        await uow.receipt_chains.caught_up(grant)
        await uow.receipt_chains.caught_up(other)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.receipt_chains.behind() == {}
        # The row saying which peer gave ``other`` stays; ``grant`` had gaps alone.
        assert await uow.receipt_chains.of_peer(peer) == [other]


async def test_a_peers_grants_are_listed_once_each_and_sorted(
    uow_factory: UnitOfWorkFactory,
) -> None:
    peer, elsewhere = fresh("peer"), fresh("peer")
    grants = sorted(fresh("grant") for _ in range(3))
    async with uow_factory() as uow:
        for grant in reversed(grants):
            await uow.receipt_chains.note(grant, peer, None)
            await uow.receipt_chains.note(grant, peer, None)
        await uow.receipt_chains.note(fresh("grant"), elsewhere, 1)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.receipt_chains.of_peer(peer) == grants
    async with uow_factory() as uow:
        await uow.receipt_chains.note(fresh("grant"), peer, 3)
        # Not committed: nothing of it stays.
    async with uow_factory() as uow:
        assert await uow.receipt_chains.of_peer(peer) == grants
