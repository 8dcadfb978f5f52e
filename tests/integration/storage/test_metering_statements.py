"""What a metered request costs each side's database, on SQLite and PostgreSQL: the grantor
settles, records and signs in one transaction of three statements (the settlement answers
the grant's row, the next receipt's place is the head it signed last, and the receipt is in
its record's row), the requester keeps
each receipt with one more; and a head another process moved is found by the INSERT, so the
chain stays gap-free and verifies."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from tests.unit.contracts.records import NOW, grant, peer, project

from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.adapters.sql.database import Database
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.domain import grants as g
from ficc.domain import metering as m
from ficc.domain import peers as p
from ficc.domain import usage_receipts as r
from ficc.services.federation.usage_receipts import UsageReceipts
from ficc.services.metering import Meter


@contextmanager
def statements() -> Iterator[collections.Counter[str]]:
    """The statements every engine runs meanwhile: an INSERT by its table, others by verb."""
    seen: collections.Counter[str] = collections.Counter()

    def count(*args: Any) -> None:
        words = str(args[2]).split()
        seen[" ".join(words[:3] if words[0] == "INSERT" else words[:1])] += 1

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", count)


async def _granted(factory: SqlUnitOfWorkFactory) -> g.Grant:
    holder = peer()
    given = grant(holder.id, tokens=10**9)
    async with factory() as uow:
        await project(uow)
        await uow.peers.add(holder)
        await uow.grants.add(given)
        await uow.commit()
    return given


async def _settled(meter: Meter, given: g.Grant, request: str) -> dict[str, Any]:
    tab = meter.open_tab(given, request, "inference.invoke", None, 90)
    await tab.admit(12, 30)
    tab.engine_started, tab.completion_tokens = True, 30
    return await meter.settle(tab, m.COMPLETED)


async def test_a_settlement_with_its_receipt_is_three_statements_and_keeping_it_one(
    database: Database,
) -> None:
    factory = SqlUnitOfWorkFactory(database)
    given = await _granted(factory)
    key = ClusterKey.generate()
    meter = Meter(factory, lambda: NOW, sign=key.sign)
    grantor = _grantor(key)
    keeper = UsageReceipts(None, verify_signature)  # type: ignore[arg-type]
    for index in range(2):
        # The first of each side reads its chain; every one after it reads nothing.
        told = await _settled(meter, given, f"req-{index}")
        record = _requester_record(given.id, f"req-{index}")
        async with factory() as uow:
            await uow.usage.add(record)
            await keeper.keep(uow, grantor, record, told["receipt"])
            await uow.commit()
    with statements() as seen:
        told = await _settled(meter, given, "req-2")
    assert seen == {
        "UPDATE": 2,  # the reservation, and the settlement answering the row it leaves
        "INSERT INTO usage_records": 1,  # the record with its receipt, in one row
    }
    with statements() as seen:
        record = _requester_record(given.id, "req-2")
        async with factory() as uow:
            await uow.usage.add(record)
            stored = await keeper.keep(uow, grantor, record, told["receipt"])
            await uow.commit()
    assert seen == {"INSERT INTO usage_records": 1, "INSERT INTO usage_receipts": 1}
    assert stored is not None
    assert (stored.seq, stored.verified, stored.problem) == (3, True, None)
    async with factory() as uow:
        standing = await uow.usage.standing(given.id)
    assert standing is not None
    assert told["remaining"]["tokens"] == standing.tokens_left(10**9) == 10**9 - 3 * 42


async def test_two_processes_signing_one_grant_in_turn_keep_its_chain_gap_free(
    database: Database,
) -> None:
    """Each meter remembers the head it signed last; the other one's receipt moved it, which
    the INSERT finds, so each reads the chain again and signs right after it."""
    factory = SqlUnitOfWorkFactory(database)
    given = await _granted(factory)
    key = ClusterKey.generate()
    first, second = (Meter(factory, lambda: NOW, sign=key.sign) for _ in range(2))
    keeper = UsageReceipts(None, verify_signature)  # type: ignore[arg-type]
    grantor = _grantor(key)
    for index, meter in enumerate([first, second, first, first, second, second, first]):
        told = await _settled(meter, given, f"req-{index}")
        assert told["receipt"]["body"]["seq"] == index + 1
        record = _requester_record(given.id, f"req-{index}")
        async with factory() as uow:
            await uow.usage.add(record)
            stored = await keeper.keep(uow, grantor, record, told["receipt"])
            if index == 3:
                # Rolled back: the requester's remembered head is not the chain's any more.
                continue
            await uow.commit()
        assert stored is not None
    async with factory() as uow:
        chain = await uow.usage_receipts.page(given.id, m.GRANTOR, after=0, limit=100)
        kept = await uow.usage_receipts.page(given.id, m.REQUESTER, after=0, limit=100)
    head, findings = r.verify_chain(
        ((item.seq, dict(item.receipt)) for item in chain),
        grant=given.id,
        public_key=key.public_key,
        verify=verify_signature,
    )
    assert (head.seq, findings) == (7, [])
    assert [item.seq for item in kept] == [1, 2, 3, 5, 6, 7]
    assert [item.verified for item in kept] == [True] * 6
    assert [item.problem for item in kept] == [None] * 6


def _requester_record(grant_id: str, request: str) -> m.UsageRecord:
    return m.UsageRecord(
        request,
        grant_id,
        m.REQUESTER,
        "inference.invoke",
        None,
        NOW,
        NOW,
        12,
        30,
        90,
        0,
        m.COMPLETED,
        told=True,
    )


def _grantor(key: ClusterKey) -> p.Peer:
    """The grantor as the requester knows it: its cluster key is ``key``."""
    return replace(peer(), cluster_key=key.public_text)
