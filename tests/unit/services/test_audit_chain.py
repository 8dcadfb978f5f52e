"""The audit log's hash chain on the fake unit of work: appends link each row to the one before,
heads are signed every HEAD_INTERVAL rows, a tombstone keeps the chain whole, and a changed,
dropped or reordered row, a forged or deleted head and a forged tombstone are each found,
naming the row."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import (
    GENESIS,
    HEAD_INTERVAL,
    ChainVerifier,
    SignedHead,
    row_digest,
)
from ficc.domain.receipts import b64
from ficc.services.audit import Audit

NOW = datetime(2026, 12, 1, 12, 0, 0, 250000, tzinfo=UTC)
KEY = ClusterKey.generate()


def entry(n: int) -> AuditEntry:
    return AuditEntry(
        "model.created", "owner:tok_x", "default", f"mdl_{n}", NOW, details={"n": n, "f": 0.5}
    )


async def filled(rows: int) -> FakeUnitOfWorkFactory:
    factory = FakeUnitOfWorkFactory(audit_signer=KEY)
    async with factory() as uow:
        for n in range(rows):
            await uow.audit.append(entry(n))
        await uow.commit()
    return factory


async def verified(factory: FakeUnitOfWorkFactory, key: ClusterKey = KEY) -> dict[str, Any]:
    return await Audit(factory, key.public_key, verify_signature).verify_chain()


def broken(report: dict[str, Any]) -> tuple[int, str]:
    assert report["intact"] is False
    return report["broken"]["seq"], report["broken"]["reason"]


async def test_each_row_carries_the_previous_digest_and_heads_are_signed_at_intervals() -> None:
    factory = await filled(2 * HEAD_INTERVAL + 3)
    rows = factory.store.audit_rows
    assert rows[0].prev == GENESIS
    assert all(row.prev == before.digest for before, row in itertools.pairwise(rows))
    assert sorted(factory.store.audit_heads) == [HEAD_INTERVAL, 2 * HEAD_INTERVAL]
    report = await verified(factory)
    assert report["intact"] is True
    assert report["rows"] == 2 * HEAD_INTERVAL + 3
    assert report["head"] == {"seq": rows[-1].seq, "digest": rows[-1].digest}
    assert report["signed_through"] == 2 * HEAD_INTERVAL
    assert report["broken"] is None


async def test_a_row_changed_in_place_is_found_naming_its_seq() -> None:
    factory = await filled(10)
    row = factory.store.audit_rows[6]
    assert row.entry is not None
    factory.store.audit_rows[6] = replace(row, entry=replace(row.entry, actor="someone else"))
    assert broken(await verified(factory)) == (7, "digest_mismatch")


async def test_a_row_changed_with_its_digest_recomputed_breaks_the_next_link() -> None:
    factory = await filled(10)
    row = factory.store.audit_rows[3]
    assert row.entry is not None
    assert row.prev is not None
    changed = replace(row.entry, details={"n": 1000})
    digest = row_digest(changed, seq=row.seq, prev=row.prev, at=row.at)
    factory.store.audit_rows[3] = replace(row, entry=changed, digest=digest)
    assert broken(await verified(factory)) == (5, "prev_mismatch")


async def test_a_dropped_row_is_found_naming_the_missing_seq() -> None:
    factory = await filled(10)
    del factory.store.audit_rows[4]
    assert broken(await verified(factory)) == (5, "missing")


async def test_reordered_rows_are_found_naming_the_first_out_of_place() -> None:
    factory = await filled(10)
    rows = factory.store.audit_rows
    # Two rows' places swapped, each renumbered to its new place (as an UPDATE of seq would).
    rows[2], rows[3] = replace(rows[3], seq=3), replace(rows[2], seq=4)
    assert broken(await verified(factory)) == (3, "prev_mismatch")


async def test_rows_dropped_after_the_last_signed_head_are_found_naming_the_first_missing() -> None:
    factory = await filled(HEAD_INTERVAL + 2)
    del factory.store.audit_rows[HEAD_INTERVAL - 4 :]
    assert broken(await verified(factory)) == (HEAD_INTERVAL - 3, "missing")


async def test_a_forged_head_signature_is_found_naming_its_seq() -> None:
    factory = await filled(HEAD_INTERVAL + 1)
    head = factory.store.audit_heads[HEAD_INTERVAL]
    other = ClusterKey.generate()
    forged = b64(other.sign(b"ficc.audit/1 signed head\x00" + bytes.fromhex(head.digest)))
    factory.store.audit_heads[HEAD_INTERVAL] = replace(head, signature=forged)
    assert broken(await verified(factory)) == (HEAD_INTERVAL, "head_signature")
    # Checked against another cluster's key, the honest heads do not hold either.
    factory.store.audit_heads[HEAD_INTERVAL] = head
    assert broken(await verified(factory, other)) == (HEAD_INTERVAL, "head_signature")


async def test_a_whole_chain_rewritten_without_the_key_is_found_at_the_signed_head() -> None:
    factory = await filled(HEAD_INTERVAL + 1)
    rewritten = FakeUnitOfWorkFactory(audit_signer=ClusterKey.generate())
    async with rewritten() as uow:
        for n in range(HEAD_INTERVAL + 1):
            await uow.audit.append(entry(n) if n != 5 else replace(entry(n), actor="forger"))
        await uow.commit()
    rewritten.store.audit_heads = dict(factory.store.audit_heads)
    assert broken(await verified(rewritten)) == (HEAD_INTERVAL, "head_mismatch")
    rewritten.store.audit_heads = {}
    assert broken(await verified(rewritten)) == (HEAD_INTERVAL, "head_missing")


async def test_a_tombstone_keeps_the_chain_verifiable_and_a_forged_one_is_found() -> None:
    factory = await filled(HEAD_INTERVAL + 5)
    async with factory() as uow:
        assert list(await uow.audit.tombstone([3, HEAD_INTERVAL, 99], NOW)) == [3, HEAD_INTERVAL]
        await uow.commit()
    rows = factory.store.audit_rows
    assert rows[2].entry is None
    assert rows[2].tombstone is not None
    assert factory.store.audit[2].action == "audit.tombstone"
    assert factory.store.audit[2].target is None
    report = await verified(factory)
    assert report["intact"] is True
    assert report["tombstones"] == 2
    # A row emptied without the cluster key's signature is no tombstone.
    rows = factory.store.audit_rows  # each transaction's end puts back a copy
    rows[5] = replace(rows[5], entry=None, tombstone=rows[2].tombstone)
    assert broken(await verified(factory)) == (6, "tombstone_signature")


async def test_a_signed_head_naming_a_row_not_there_is_a_break() -> None:
    factory = await filled(5)
    factory.store.audit_heads[HEAD_INTERVAL] = SignedHead(HEAD_INTERVAL, "00" * 32, "AA")
    assert broken(await verified(factory)) == (6, "missing")


async def test_seal_signs_a_chain_no_head_signs_once() -> None:
    unsigned = await filled(HEAD_INTERVAL + 3)
    unsigned.store.audit_heads.clear()  # rows a migration chained: no key signed them
    factory = unsigned.signed_by(KEY)
    log = Audit(factory, KEY.public_key, verify_signature)
    assert await log.seal() == HEAD_INTERVAL + 3
    assert await log.seal() is None
    report = await verified(factory)
    assert report["intact"] is True
    assert report["signed_through"] == HEAD_INTERVAL + 3


async def test_a_tombstone_needs_the_cluster_key() -> None:
    factory = FakeUnitOfWorkFactory()
    async with factory() as uow:
        await uow.audit.append(entry(1))
        with pytest.raises(RuntimeError, match="cluster key"):
            await uow.audit.tombstone([1], NOW)


async def test_rows_appended_while_verifying_need_no_head_the_verifier_did_not_read() -> None:
    factory = await filled(HEAD_INTERVAL - 1)
    verifier = ChainVerifier(KEY.public_key, verify_signature, {}, due_through=HEAD_INTERVAL - 1)
    async with factory() as uow:  # the head row comes after the heads were read
        await uow.audit.append(entry(HEAD_INTERVAL))
        await uow.commit()
    assert verifier.feed(factory.store.audit_rows)
    assert verifier.finish() is None
    without_end = ChainVerifier(KEY.public_key, verify_signature, {})
    assert not without_end.feed(factory.store.audit_rows)
    assert without_end.broken is not None
    assert without_end.broken.reason == "head_missing"
