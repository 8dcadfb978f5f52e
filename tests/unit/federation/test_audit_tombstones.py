"""Retire and forget keep the grantor's audit chain verifiable: retire deletes the grant's
operation receipts, which are no audit rows, and adds its own row; forget deletes the pairing
and turns the audit rows naming the peer, its offers and its grants into signed tombstones, so
the chain keeps each row's digest and has no hole."""

from __future__ import annotations

from tests.support.fakes.peer_channel import OWNER, Pair, paired, peers_of

from ficc.adapters.keys import verify_signature
from ficc.bootstrap import Cluster
from ficc.domain.audit_chain import TOMBSTONE_ACTION
from ficc.services import audit


async def _verified(cluster: Cluster) -> dict[str, object]:
    return await audit.verify_chain(
        cluster.uow_factory,
        public_key=cluster.cluster_key.public_key,
        verify=verify_signature,
    )


async def test_retire_and_forget_leave_signed_tombstones_and_the_chain_verifies(
    pair: Pair,
) -> None:
    finished = await paired(pair, {"scopes": ["discover"]})
    [peer] = await peers_of(pair.grantor)
    grantor = pair.grantor
    async with grantor.uow_factory() as uow:
        [grant] = await uow.grants.of_peer(peer.id)
    await grantor.federation.peers.remove_peer(OWNER, "default", peer.id)
    await grantor.federation.grants.retire_grant(OWNER, "default", grant.id)
    assert (await _verified(grantor))["intact"] is True
    named = {peer.id, grant.id, finished["offer"]["id"]}
    before = [e for e in grantor_audit(grantor) if e.target in named]
    assert {e.action for e in before} >= {"offer.approved", "peer.removed", "grant.retired"}

    await grantor.federation.peers.forget_peer(OWNER, "default", peer.id)

    entries = grantor_audit(grantor)
    tombstoned = sorted(e.seq for e in before if e.seq is not None)
    assert [e.seq for e in entries if e.action == TOMBSTONE_ACTION] == tombstoned
    assert all(e.target not in named for e in entries if e.action != "peer.forgotten")
    forgotten = entries[-1]
    assert (forgotten.action, forgotten.target) == ("peer.forgotten", peer.id)
    assert forgotten.details == {"tombstoned": tombstoned}
    report = await _verified(grantor)
    assert report["intact"] is True
    assert report["tombstones"] == len(tombstoned)
    assert report["rows"] == len(entries)


def grantor_audit(cluster: Cluster) -> list[audit.AuditEntry]:
    store = getattr(cluster.uow_factory, "store")  # noqa: B009  (the fake's committed state)
    return list(store.audit)
