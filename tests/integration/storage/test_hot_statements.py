"""A hot statement (rendered once, straight to SQLite's driver) writes what SQLAlchemy would
write, on both backends, refuses what its own WHERE refuses, and steps aside for whatever
listens to the engine's statements, so that no count or trace misses one."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import bindparam, event, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from ficc.adapters.sql import metering_tables as t
from ficc.adapters.sql import tables
from ficc.adapters.sql.database import Database, HotStatement, execute_hot
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r

GRANT = "grt_" + "h" * 26


def _receipt(seq: int, verified: bool) -> r.StoredReceipt:
    body = {"kind": r.USAGE_KIND, "seq": seq, "grant": GRANT, "text": "é ✓"}
    receipt = {"body": body, "digest": f"{seq:064x}", "signature": "c2ln"}
    problem = None if verified else r.SIGNATURE
    return r.StoredReceipt(GRANT, m.REQUESTER, seq, f"req-{seq}", receipt, verified, problem)


async def test_a_hot_insert_keeps_the_row_sqlalchemy_reads_back_and_refuses_a_moved_head(
    database: Database,
) -> None:
    factory = SqlUnitOfWorkFactory(database)
    first, second = _receipt(1, True), _receipt(2, False)
    async with factory() as uow:
        assert await uow.usage_receipts.append_after(first, r.EMPTY_HEAD)
        # The head it follows is not the chain's any more: nothing goes in.
        assert not await uow.usage_receipts.append_after(second, r.EMPTY_HEAD)
        head = await uow.usage_receipts.head(GRANT, m.REQUESTER)
        assert await uow.usage_receipts.append_after(second, head)
        await uow.commit()
    async with factory() as uow:
        kept = await uow.usage_receipts.page(GRANT, m.REQUESTER, after=0, limit=10)
    assert kept == [first, second]
    assert [(item.verified, item.problem) for item in kept] == [(True, None), (False, "signature")]


async def test_a_hot_statement_is_seen_by_what_listens_to_the_engine(database: Database) -> None:
    factory = SqlUnitOfWorkFactory(database)
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(str(args[2]).split()[0])

    event.listen(Engine, "before_cursor_execute", count)
    try:
        async with factory() as uow:
            assert await uow.usage_receipts.append_after(_receipt(1, True), r.EMPTY_HEAD)
            await uow.commit()
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    assert seen == ["INSERT"]
    async with factory() as uow:
        head = await uow.usage_receipts.head(GRANT, m.REQUESTER)
        # Nothing listens now: on SQLite the driver runs it, unseen, and the row is there.
        assert await uow.usage_receipts.append_after(_receipt(2, True), head)
        await uow.commit()
    async with factory() as uow:
        kept = await uow.usage_receipts.page(GRANT, m.REQUESTER, after=0, limit=10)
    assert seen == ["INSERT"]
    assert [(item.seq, item.verified) for item in kept] == [(1, True), (2, True)]


async def test_a_hot_statement_that_breaks_a_constraint_raises_as_sqlalchemy_would(
    database: Database,
) -> None:
    """A caller catches SQLAlchemy's errors (a lease's IntegrityError): the driver's own
    are raised as those, on SQLite as on PostgreSQL."""
    hot = HotStatement(insert(t.usage_receipts))
    values = {
        "grant_id": GRANT,
        "side": m.REQUESTER,
        "seq": 1,
        "request_id": "req-1",
        "digest": "0" * 64,
        "receipt": "{}",
        "verified": False,
        "problem": None,
    }
    connection = await database.connect()
    try:
        assert await execute_hot(connection, hot, values) == []
        with pytest.raises(IntegrityError):
            await execute_hot(connection, hot, values)
    finally:
        await connection.rollback()
        await connection.close()


async def test_a_hot_read_gives_the_rows_sqlalchemy_gives(database: Database) -> None:
    """Each row named by its columns and each value read as SQLAlchemy reads it (a JSON
    column decoded), on SQLite's driver as through SQLAlchemy; an UPDATE's RETURNING alike."""
    settings = tables.cluster_settings
    value = {"nested": [1, 2.5, "é ✓"], "none": None}
    reading = select(settings).where(settings.c.key == bindparam("b_key"))
    changing = (
        update(settings)
        .where(settings.c.key == bindparam("b_key"))
        .values(value=bindparam("b_value", type_=settings.c.value.type))
        .returning(settings)
    )
    connection = await database.connect()
    try:
        await connection.execute(insert(settings).values(key="hot", value=value))
        expected = [*await connection.execute(reading, {"b_key": "hot"})]
        hot = await execute_hot(connection, HotStatement(reading), {"b_key": "hot"})
        assert [row._asdict() for row in hot] == [row._asdict() for row in expected]
        assert hot[0].value == value
        changed = await execute_hot(
            connection, HotStatement(changing), {"b_key": "hot", "b_value": [3]}
        )
        assert [row._asdict() for row in changed] == [{"key": "hot", "value": [3]}]
        assert await execute_hot(connection, HotStatement(reading), {"b_key": "cold"}) == []
    finally:
        await connection.rollback()
        await connection.close()
