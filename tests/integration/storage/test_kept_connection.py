"""SQLite's transactions begin on the connection the last one ended on (no pool checkout per
transaction), and what a transaction left undone never reaches the next: a write rolled back
is gone, one whose unit of work failed is gone, and two units of work open at once (each
factory has its own writer lock) never share a connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ResourceClosedError
from tests.unit.contracts.records import NOW, project

from ficc.adapters.sql.database import Database, LoopConnection, default_url
from ficc.adapters.sql.schema import upgrade
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory


def _driver(connection: object) -> object:
    assert isinstance(connection, LoopConnection)
    return connection._connection.connection.driver_connection


@pytest.fixture
async def database(tmp_path: Path) -> Database:
    opened = Database(default_url(tmp_path))
    await upgrade(opened)
    return opened


async def test_a_transaction_begins_on_the_connection_the_last_one_ended_on(
    database: Database,
) -> None:
    checkouts: list[object] = []

    def opened(connection: object) -> None:
        checkouts.append(connection)

    event.listen(Engine, "engine_connect", opened)
    try:
        factory = SqlUnitOfWorkFactory(database)
        async with factory() as uow:
            await project(uow)
            first = _driver(uow.connection)
            await uow.commit()
        for _ in range(5):
            async with factory() as uow:
                assert await uow.projects.exists("default")
                assert _driver(uow.connection) is first
    finally:
        event.remove(Engine, "engine_connect", opened)
        await database.dispose()
    assert len(checkouts) == 1


async def test_what_a_failed_unit_of_work_wrote_never_reaches_the_next(database: Database) -> None:
    factory = SqlUnitOfWorkFactory(database)
    try:

        async def failing() -> None:
            async with factory() as uow:
                await project(uow)
                raise RuntimeError("the handler failed after its write")

        with pytest.raises(RuntimeError):
            await failing()
        async with factory() as uow:
            assert not await uow.projects.exists("default")
            await project(uow)
        # Left without a commit: rolled back too.
        async with factory() as uow:
            assert not await uow.projects.exists("default")
            await project(uow)
            await uow.commit()
        async with factory() as uow:
            assert await uow.projects.exists("default")
    finally:
        await database.dispose()


async def test_two_units_of_work_open_at_once_have_two_connections(database: Database) -> None:
    one, other = SqlUnitOfWorkFactory(database), SqlUnitOfWorkFactory(database)
    try:
        async with one() as first, other() as second:
            drivers = {id(_driver(first.connection)), id(_driver(second.connection))}
            await project(second)
            await second.commit()
        assert len(drivers) == 2
        async with one() as again:
            # One of the two was kept for the next transaction; the other was closed.
            assert id(_driver(again.connection)) in drivers
            assert await again.projects.exists("default")
    finally:
        await database.dispose()


async def test_a_repository_kept_past_its_transaction_reaches_no_later_one(
    database: Database,
) -> None:
    factory = SqlUnitOfWorkFactory(database)
    try:
        async with factory() as uow:
            stale = uow.projects
        async with factory() as later:
            # The later transaction runs on the kept connection; the stale repository may not.
            with pytest.raises(ResourceClosedError):
                await stale.add("intruder", NOW)
            await project(later)
            await later.commit()
            with pytest.raises(RuntimeError, match="not open"):
                await uow.commit()
        async with factory() as uow:
            assert not await uow.projects.exists("intruder")
    finally:
        await database.dispose()
