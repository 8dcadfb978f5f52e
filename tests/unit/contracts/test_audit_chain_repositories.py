"""The audit log's hash chain holds alike in the fake and in SQL (SQLite here, PostgreSQL in
``tests/integration/storage/test_repository_contracts.py``): rows linked in ``seq`` order,
heads signed at intervals, concurrent writers kept in one line, tombstones that keep the links."""

from __future__ import annotations

import asyncio

from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory
from tests.unit.contracts.records import at

from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import GENESIS, HEAD_INTERVAL, TOMBSTONE_ACTION, ChainReport
from ficc.services.audit import Audit
from ficc.services.ports import UnitOfWorkFactory

KEY = ClusterKey.generate()


def signed(uow_factory: UnitOfWorkFactory) -> UnitOfWorkFactory:
    assert isinstance(uow_factory, FakeUnitOfWorkFactory | SqlUnitOfWorkFactory)
    return uow_factory.signed_by(KEY)


def entry(n: int, *, project: str | None = "one", target: str | None = None) -> AuditEntry:
    return AuditEntry(
        "thing.done",
        "owner:tok_1",
        project,
        target or f"thing_{n}",
        at(n),
        details={"n": n, "ratio": 0.1, "label": "Zürich 🔬", "list": (1, 2)},
        peer_hypernet_id="ab" * 32 if n % 2 else None,
    )


async def verified(uow_factory: UnitOfWorkFactory) -> ChainReport:
    return await Audit(uow_factory, KEY.public_key, verify_signature).verify_chain()


async def test_appended_rows_form_a_chain_with_heads_signed_every_interval(
    uow_factory: UnitOfWorkFactory,
) -> None:
    factory = signed(uow_factory)
    async with factory() as uow:
        seqs = [await uow.audit.append(entry(n)) for n in range(HEAD_INTERVAL + 2)]
        await uow.commit()
    assert seqs == list(range(1, HEAD_INTERVAL + 3))
    async with factory() as uow:
        rows = await uow.audit.chain(after_seq=0, limit=1000)
        heads = await uow.audit.heads()
        page = await uow.audit.chain(after_seq=3, limit=2)
        end = await uow.audit.end()
    assert [row.seq for row in rows] == seqs
    assert rows[0].prev == GENESIS
    assert [row.prev for row in rows[1:]] == [row.digest for row in rows[:-1]]
    assert [row.seq for row in page] == [4, 5]
    assert end == HEAD_INTERVAL + 2
    assert [(head.seq, head.digest) for head in heads] == [(HEAD_INTERVAL, rows[-3].digest)]
    first = rows[0].entry
    assert first is not None
    assert first.details == {"n": 0, "ratio": 0.1, "label": "Zürich 🔬", "list": [1, 2]}
    assert rows[0].at == "2026-11-30T12:00:00.123456Z"
    report = await verified(factory)
    assert report["intact"] is True
    assert report["rows"] == HEAD_INTERVAL + 2


async def test_concurrent_writers_keep_the_chain_in_one_line(
    uow_factory: UnitOfWorkFactory,
) -> None:
    factory = signed(uow_factory)

    async def writer(w: int) -> None:
        async with factory() as uow:
            for n in range(4):
                await uow.audit.append(entry(10 * w + n))
                await asyncio.sleep(0)  # let the other writers run between statements
            await uow.commit()

    await asyncio.gather(*(writer(w) for w in range(10)))
    report = await verified(factory)
    assert report["intact"] is True
    assert report["rows"] == 40
    assert report["signed_through"] == HEAD_INTERVAL


async def test_a_tombstone_keeps_the_links_and_drops_the_content(
    uow_factory: UnitOfWorkFactory,
) -> None:
    factory = signed(uow_factory)
    async with factory() as uow:
        for n in range(6):
            await uow.audit.append(entry(n, target="peer_x" if n in (1, 4) else None))
        await uow.audit.append(entry(9, project="two", target="peer_x"))
        await uow.audit.append(entry(10, project=None, target="peer_x"))
        await uow.commit()
    async with factory() as uow:
        named = await uow.audit.naming("one", ["peer_x", "thing_5"])
        assert list(named) == [2, 5, 6, 8]
        assert list(await uow.audit.tombstone(named, at(60))) == [2, 5, 6, 8]
        await uow.commit()
    async with factory() as uow:
        assert list(await uow.audit.tombstone([2], at(61))) == []
        assert list(await uow.audit.naming("one", ["peer_x"])) == []
        rows = await uow.audit.chain(after_seq=0, limit=100)
        listed = await uow.audit.list(project=None, after_seq=0, limit=100)
        own = await uow.audit.list(project="one", after_seq=0, limit=100, cluster_wide=False)
    assert [row.seq for row in rows if row.entry is None] == [2, 5, 6, 8]
    tombstone = listed[1]
    assert (tombstone.seq, tombstone.action, tombstone.actor) == (2, TOMBSTONE_ACTION, "")
    assert (tombstone.project, tombstone.target, tombstone.details) == (None, None, {})
    assert tombstone.peer_hypernet_id is None
    assert tombstone.at == at(60)
    assert [e.seq for e in own] == [1, 3, 4]
    report = await verified(factory)
    assert report["intact"] is True
    assert report["tombstones"] == 4
    assert report["rows"] == 8


async def test_seal_signs_the_last_row_only_while_no_head_is_signed(
    uow_factory: UnitOfWorkFactory,
) -> None:
    async with uow_factory() as uow:
        assert await uow.audit.end() == 0
    async with uow_factory() as uow:  # no key: rows as the migration leaves them
        for n in range(3):
            await uow.audit.append(entry(n))
        await uow.commit()
    factory = signed(uow_factory)
    log = Audit(factory, KEY.public_key, verify_signature)
    assert await log.seal() == 3
    assert await log.seal() is None
    async with factory() as uow:
        assert [head.seq for head in await uow.audit.heads()] == [3]
    assert (await verified(factory))["signed_through"] == 3
