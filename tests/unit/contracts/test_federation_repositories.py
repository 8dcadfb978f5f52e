"""Peers, offers, grants, copies of a peer's grants and transfers behave alike in the fake and
in SQL: which offers wait, which are purged, what a grant created, how a charge counts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from tests.unit.contracts.records import (
    DUPLICATE,
    NOW,
    at,
    committed,
    digest,
    fresh,
    grant,
    model,
    offer,
    peer,
    project,
)

from ficc.domain.grants import GrantState
from ficc.domain.inference import ServiceState, parse_service_spec
from ficc.domain.offers import OfferDirection, OfferState
from ficc.domain.peers import PeerState
from ficc.domain.service_records import ServiceRecord
from ficc.domain.transfers import Transfer, TransferFile, TransferState
from ficc.services.ports import UnitOfWorkFactory


async def test_peers_are_found_by_hypernet_id_and_listed_by_project_oldest_first(
    uow_factory: UnitOfWorkFactory,
) -> None:
    shared = "b" * 64
    later, first = peer(hypernet_id=shared, age=5), peer(hypernet_id=shared, age=1)
    elsewhere = peer("other")
    async with uow_factory() as uow:
        await project(uow)
        await project(uow, "other")
        for record in (later, first, elsewhere):
            await uow.peers.add(record)
        await uow.peers.update(replace(first, state=PeerState.REMOVED, generation=2))
        await uow.commit()
    revoked = replace(first, state=PeerState.REMOVED, generation=2)
    async with uow_factory() as uow:
        assert await uow.peers.in_project("default") == [revoked, later]
        found = await uow.peers.by_hypernet_id(shared)
        assert sorted(found, key=lambda p: p.id) == sorted([revoked, later], key=lambda p: p.id)
        await uow.peers.delete(later.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.peers.get(later.id) is None
        assert await uow.peers.get(elsewhere.id) == elsewhere
    with pytest.raises(DUPLICATE):
        await committed(uow_factory, lambda uow: uow.peers.add(elsewhere))


async def test_waiting_offers_are_counted_by_service_and_source_and_the_oldest_comes_first(
    uow_factory: UnitOfWorkFactory,
) -> None:
    a, b = "a" * 64, "b" * 64
    offers = [
        offer(age=3, service=a),
        offer(age=1, service=a, source="net:1"),
        offer(age=2, service=b, source="net:1"),
        offer(age=0, service=b, lifetime=5),  # expired by ``now``
        offer(age=0, service=a, state=OfferState.APPROVED),
        offer(age=0, service=a, direction=OfferDirection.OUTGOING, state=OfferState.SENT),
    ]
    async with uow_factory() as uow:
        for record in offers:
            await uow.offers.add(record)
        await uow.commit()
    now = at(10)
    async with uow_factory() as uow:
        assert await uow.offers.count_received(now=now) == 3
        assert await uow.offers.count_received(now=now, service=a) == 2
        assert await uow.offers.count_received(now=now, source="net:1") == 2
        assert await uow.offers.count_received(now=now, source=a) == 1
        assert await uow.offers.oldest_received(now=now) == offers[1]
        assert await uow.offers.oldest_received(now=now, service=b) == offers[2]
        assert await uow.offers.oldest_received(now=now, source=b) is None
        assert await uow.offers.busiest_source(now=now) == "net:1"
        assert await uow.offers.busiest_source(now=at(1000)) is None


async def test_offers_seen_by_a_project_page_oldest_first_and_their_ids_are_never_reused(
    uow_factory: UnitOfWorkFactory,
) -> None:
    target = peer()
    mine = [offer(age=i, project_name="default") for i in range(3)]
    unclaimed = offer(age=1.5)
    theirs = offer(age=0, project_name="other")
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(target)
        for record in (*mine, unclaimed, theirs):
            await uow.offers.add(record)
        await uow.offers.update(replace(mine[2], peer_id=target.id, state=OfferState.FINISHED))
        await uow.offers.lock(mine[0].id)
        await uow.commit()
    finished = replace(mine[2], peer_id=target.id, state=OfferState.FINISHED)
    async with uow_factory() as uow:
        assert await uow.offers.visible_to("default") == [mine[0], mine[1], unclaimed, finished]
        assert await uow.offers.visible_to("default", after=mine[1].id, limit=1) == [unclaimed]
        assert await uow.offers.of_peer(target.id) == [finished]
        await uow.offers.delete(mine[0].id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.offers.get(mine[0].id) is None
        assert await uow.offers.ever_used(mine[0].id)
        assert not await uow.offers.ever_used(fresh("offer"))
    with pytest.raises(DUPLICATE):
        await committed(uow_factory, lambda uow: uow.offers.add(mine[0]))


async def test_purge_drops_only_expired_offers_no_pairing_refers_to(
    uow_factory: UnitOfWorkFactory,
) -> None:
    old = [
        offer(state=s, lifetime=5)
        for s in (OfferState.SENT, OfferState.DISCARDED, OfferState.APPROVED, OfferState.FINISHED)
    ]
    fresh_one = offer(lifetime=500)
    async with uow_factory() as uow:
        for record in (*old, fresh_one):
            await uow.offers.add(record)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.offers.purge(expired_before=at(100)) == 2
        await uow.commit()
    async with uow_factory() as uow:
        left = [await uow.offers.get(o.id) for o in (*old, fresh_one)]
        assert left == [None, None, old[2], old[3], fresh_one]


async def test_a_grant_shows_what_it_created_and_charges_count_to_its_cap(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = peer()
    first, second = grant(holder.id, age=2, requests=2), grant(holder.id, age=1)
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(holder)
        await uow.grants.add(first)
        await uow.grants.add(second)
        created = model("default", [digest()], by_grant=first.id)
        await uow.models.add(created)
        service = ServiceRecord(
            id=fresh("service"),
            project="default",
            spec=parse_service_spec({"name": "s", "model": created.id, "runtime": "llama.cpp"}),
            node=fresh("node"),
            state=ServiceState.STOPPED,
            revision=1,
            error=None,
            created_by_grant=first.id,
            created_at=NOW,
            updated_at=NOW,
        )
        await uow.services.add(service)
        await uow.grants.lock(first.id)
        assert await uow.grants.charge_request(first.id, requests=2)
        assert await uow.grants.charge_request(first.id, requests=2)
        assert not await uow.grants.charge_request(first.id, requests=2)
        await uow.grants.charge(first.id, requests=3, transfer_bytes=100)
        await uow.grants.set_state(second.id, GrantState.REVOKED, at(5))
        await uow.grants.set_state(first.id, GrantState.EXPIRED, None)
        await uow.commit()
    charged = replace(
        first,
        state=GrantState.EXPIRED,
        requests_used=5,
        transfer_bytes_used=100,
        created_services=frozenset({service.id}),
        created_models=frozenset({created.id}),
    )
    revoked = replace(second, state=GrantState.REVOKED, revoked_at=at(5))
    async with uow_factory() as uow:
        assert await uow.grants.get(first.id) == charged
        assert await uow.grants.of_peer(holder.id) == [revoked, charged]
        assert await uow.grants.in_project("default") == [revoked, charged]
        assert await uow.grants.in_project("other") == []
        await uow.grants.delete(second.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.grants.get(second.id) is None


async def test_a_peers_grant_copies_are_replaced_whole(uow_factory: UnitOfWorkFactory) -> None:
    one, other = peer(), peer()
    first: list[dict[str, Any]] = [
        {"id": fresh("grant"), "scopes": ("inference:invoke",)},
        {"id": fresh("grant")},
    ]
    then: list[dict[str, Any]] = [{"id": fresh("grant"), "n": 1}]
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(one)
        await uow.peers.add(other)
        await uow.remote_grants.replace_for_peer(one.id, first, NOW)
        await uow.remote_grants.replace_for_peer(other.id, then, NOW)
        await uow.commit()
    async with uow_factory() as uow:
        copies = await uow.remote_grants.of_peer(one.id)
        assert sorted(copies, key=lambda g: str(g["id"])) == sorted(
            [{**first[0], "scopes": ["inference:invoke"]}, first[1]], key=lambda g: g["id"]
        )
        await uow.remote_grants.replace_for_peer(one.id, [first[1]], at(1))
        await uow.remote_grants.delete_for_peer(other.id)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.remote_grants.of_peer(one.id) == [first[1]]
        assert await uow.remote_grants.of_peer(other.id) == []


async def test_transfers_are_found_by_model_newest_first_and_by_state(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = peer()

    def transfer(age: float, state: TransferState = TransferState.RUNNING) -> Transfer:
        return Transfer(
            id=fresh("transfer"),
            project="default",
            peer_id=holder.id,
            remote_model="mdl_remote",
            grant_id=fresh("grant"),
            manifest={"name": "m", "files": []},
            sha256=digest(),
            state=state,
            files=(TransferFile(path="w.gguf", size=10, sha256=digest(), done=4),),
            local_model=None,
            error=None,
            created_at=at(age),
            updated_at=at(age),
        )

    older, newer = transfer(1, TransferState.PAUSED), transfer(2)
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(holder)
        await uow.transfers.add(newer)
        await uow.transfers.add(older)
        await uow.commit()
    done = replace(newer, state=TransferState.COMPLETE, local_model="mdl_local", updated_at=at(3))
    async with uow_factory() as uow:
        assert await uow.transfers.of_model("default", holder.id, "mdl_remote") == newer
        assert await uow.transfers.of_model("default", holder.id, "mdl_other") is None
        await uow.transfers.update(done)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.transfers.get(newer.id) == done
        assert await uow.transfers.in_project("default") == [older, done]
        assert await uow.transfers.in_state(TransferState.PAUSED) == [older]
        assert await uow.transfers.in_state(TransferState.RUNNING) == []
