"""A receipt chain's head as this process committed it: on SQLite, a receipt right after it
goes in without the conditional INSERT; a rolled-back transaction leaves the committed head,
and a row the repository did not write sends the next receipt back to the conditional INSERT,
which refuses it. PostgreSQL, whose database other processes share, always checks; both
backends keep and refuse the same receipts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, insert
from sqlalchemy.engine import Engine

from ficc.adapters.sql import metering_tables as t
from ficc.adapters.sql.database import Database
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r

GRANT = "grt_" + "c" * 26


def _receipt(seq: int, mark: str = "a") -> r.StoredReceipt:
    body = {"kind": r.USAGE_KIND, "seq": seq, "grant": GRANT, "mark": mark}
    receipt = {"body": body, "digest": f"{mark}{seq:063x}", "signature": "c2ln"}
    return r.StoredReceipt(GRANT, m.GRANTOR, seq, f"req-{seq}-{mark}", receipt, True)


def _head(receipt: r.StoredReceipt) -> r.Head:
    return r.Head(receipt.seq, receipt.digest, {})


async def _chain(factory: SqlUnitOfWorkFactory) -> list[tuple[int, str]]:
    async with factory() as uow:
        kept = await uow.usage_receipts.page(GRANT, m.GRANTOR, after=0, limit=10)
    return [(item.seq, item.request) for item in kept]


async def test_a_rolled_back_receipt_leaves_the_chain_at_its_committed_head(
    database: Database,
) -> None:
    factory = SqlUnitOfWorkFactory(database)
    first, lost, second = _receipt(1), _receipt(2, "b"), _receipt(2, "c")
    async with factory() as uow:
        assert await uow.usage_receipts.append_after(first, r.EMPTY_HEAD)
        await uow.commit()
    async with factory() as uow:
        assert await uow.usage_receipts.append_after(lost, _head(first))
        # Left without a commit: rolled back.
    async with factory() as uow:
        assert not await uow.usage_receipts.append_after(_receipt(3), _head(lost))
        assert await uow.usage_receipts.append_after(second, _head(first))
        await uow.commit()
    assert await _chain(factory) == [(1, "req-1-a"), (2, "req-2-c")]


async def test_a_receipt_after_the_committed_head_skips_the_check_on_sqlite_alone(
    database: Database,
) -> None:
    factory = SqlUnitOfWorkFactory(database)
    first = _receipt(1)
    async with factory() as uow:
        assert await uow.usage_receipts.append_after(first, r.EMPTY_HEAD)
        await uow.commit()
    seen: list[str] = []

    def statement(*args: Any) -> None:
        if str(args[2]).startswith("INSERT"):
            seen.append(str(args[2]))

    event.listen(Engine, "before_cursor_execute", statement)
    try:
        async with factory() as uow:
            assert await uow.usage_receipts.append_after(_receipt(2), _head(first))
            await uow.commit()
    finally:
        event.remove(Engine, "before_cursor_execute", statement)
    (sql,) = seen
    assert ("EXISTS" in sql) is (not database.is_sqlite)
    assert await _chain(factory) == [(1, "req-1-a"), (2, "req-2-a")]


async def test_a_row_the_repository_did_not_write_sends_the_receipt_to_the_check(
    database: Database,
) -> None:
    """Another writer's row at the next seq: the receipt is refused, nothing raised, and the
    transaction goes on (the chain's head read again)."""
    factory = SqlUnitOfWorkFactory(database)
    first, theirs = _receipt(1), _receipt(2, "d")
    async with factory() as uow:
        assert await uow.usage_receipts.append_after(first, r.EMPTY_HEAD)
        await uow.commit()
    async with factory() as uow:
        await uow.connection.execute(
            insert(t.usage_receipts).values(
                grant_id=GRANT,
                side=m.GRANTOR,
                seq=2,
                request_id=theirs.request,
                digest=theirs.digest,
                receipt="{}",
                verified=True,
                problem=None,
            )
        )
        await uow.commit()
    async with factory() as uow:
        assert not await uow.usage_receipts.append_after(_receipt(2), _head(first))
        head = await uow.usage_receipts.head(GRANT, m.GRANTOR)
        assert (head.seq, head.digest) == (2, theirs.digest)
        assert await uow.usage_receipts.append_after(_receipt(3), head)
        await uow.commit()
    assert await _chain(factory) == [(1, "req-1-a"), (2, "req-2-d"), (3, "req-3-a")]
