"""Retire and forget keep the grantor's audit chain verifiable: retire deletes the grant's
operation receipts and forget the pairing's records, none of them audit rows, and each adds its
own row; forget with ``erase_audit`` turns the audit rows naming the peer, its offers and its
grants into signed tombstones, so the chain keeps each row's digest and has no hole."""

from __future__ import annotations

import httpx
from tests.support.fakes.peer_channel import OWNER, Pair, paired, peers_of

from ficc.bootstrap import Cluster
from ficc.domain.audit_chain import TOMBSTONE_ACTION
from ficc.services import audit
from ficc.web.app import create_app


async def _verified(cluster: Cluster) -> dict[str, object]:
    return await cluster.audit.verify_chain()


async def _forget_setup(pair: Pair) -> tuple[Cluster, str, set[str]]:
    finished = await paired(pair, {"scopes": ["discover"]})
    [peer] = await peers_of(pair.grantor)
    grantor = pair.grantor
    async with grantor.uow_factory() as uow:
        [grant] = await uow.grants.of_peer(peer.id)
    await grantor.federation.peers.remove_peer(OWNER, "default", peer.id)
    await grantor.federation.grants.retire_grant(OWNER, "default", grant.id)
    assert (await _verified(grantor))["intact"] is True
    named = {peer.id, grant.id, finished.offer.id}
    return grantor, peer.id, named


async def test_forget_keeps_the_pairings_history_and_the_chain_verifies(pair: Pair) -> None:
    grantor, peer_id, _ = await _forget_setup(pair)
    before = grantor_audit(grantor)
    token = (grantor.settings.state_dir / "owner.token").read_text().strip()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(grantor)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    ) as api:
        answer = await api.post(f"/api/v1/federation/peers/{peer_id}/forget")  # no body
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"peer": peer_id, "forgotten": True}
    entries = grantor_audit(grantor)
    assert entries[: len(before)] == before
    assert (entries[-1].action, entries[-1].details) == ("peer.forgotten", {})
    report = await _verified(grantor)
    assert (report["intact"], report["tombstones"], report["rows"]) == (True, 0, len(entries))


async def test_forget_erasing_the_audit_leaves_signed_tombstones_and_the_chain_verifies(
    pair: Pair,
) -> None:
    grantor, peer_id, named = await _forget_setup(pair)
    before = [e for e in grantor_audit(grantor) if e.target in named]
    actions = {e.action for e in before}
    assert actions >= {"offer.received", "offer.approved", "peer.removed", "grant.retired"}

    answer = await grantor.federation.peers.forget_peer(OWNER, "default", peer_id, erase_audit=True)

    entries = grantor_audit(grantor)
    tombstoned = sorted(e.seq for e in before if e.seq is not None)
    assert [e.seq for e in entries if e.action == TOMBSTONE_ACTION] == tombstoned
    assert all(e.target not in named for e in entries if e.action != "peer.forgotten")
    assert answer["tombstoned"] == tombstoned
    forgotten = entries[-1]
    assert (forgotten.action, forgotten.target) == ("peer.forgotten", peer_id)
    assert forgotten.details == {"tombstoned": tombstoned}
    report = await _verified(grantor)
    assert report["intact"] is True
    assert report["tombstones"] == len(tombstoned)
    assert report["rows"] == len(entries)


def grantor_audit(cluster: Cluster) -> list[audit.AuditEntry]:
    store = getattr(cluster.uow_factory, "store")  # noqa: B009  (the fake's committed state)
    return list(store.audit)


async def test_the_forget_route_takes_erase_audit_and_refuses_other_fields(pair: Pair) -> None:
    grantor, peer_id, named = await _forget_setup(pair)
    token = (grantor.settings.state_dir / "owner.token").read_text().strip()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(grantor)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    ) as api:
        url = f"/api/v1/federation/peers/{peer_id}/forget"
        refused = await api.post(url, json={"erase": True})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_request"
        answer = await api.post(url, json={"erase_audit": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()["forgotten"] is True
    assert answer.json()["tombstoned"]
    assert all(e.target not in named for e in grantor_audit(grantor)[:-1])
    assert (await _verified(grantor))["intact"] is True
