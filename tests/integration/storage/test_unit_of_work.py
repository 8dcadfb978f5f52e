"""Units of work and repositories on both backends: what commits stays, what does not is gone,
the audit log cannot be changed, concurrent charges of one grant all count, and concurrent
creations under one grant count one after another."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from tests.support.postgres import PostgresServer

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.database import Database
from ficc.adapters.sql.schema import head_revision, schema_state, upgrade
from ficc.adapters.sql.unit_of_work import SqlUnitOfWork, SqlUnitOfWorkFactory
from ficc.domain.audit import AuditEntry
from ficc.services import mutations
from ficc.services.companion import COMPANION_SETTING
from ficc.services.mutations import MutationKey

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_a_new_database_is_migrated_to_head_and_migrating_again_changes_nothing(
    database: Database,
) -> None:
    assert (await schema_state(database)).current == head_revision()
    assert await upgrade(database) is None
    assert (await schema_state(database)).current == head_revision()


async def test_committed_work_stays_and_work_left_uncommitted_is_rolled_back(
    database: Database,
) -> None:
    uow_factory = SqlUnitOfWorkFactory(database)
    async with uow_factory() as uow:
        await uow.settings.put("kept", {"n": 1, "text": "é"})
        await uow.commit()

    async def refused() -> None:
        async with uow_factory() as uow:
            await uow.settings.put("kept", {"n": 2})
            await uow.settings.put("dropped", [1, 2, 3])
            raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        await refused()
    async with uow_factory() as uow:
        assert await uow.settings.get("kept") == {"n": 1, "text": "é"}
        assert await uow.settings.get("dropped") is None


async def test_the_audit_log_refuses_updates_and_deletes_and_keeps_its_entries(
    database: Database,
) -> None:
    uow_factory = SqlUnitOfWorkFactory(database)
    async with uow_factory() as uow:
        first = await uow.audit.append(
            AuditEntry(action="a.first", actor="test", project=None, target=None, at=NOW)
        )
        second = await uow.audit.append(
            AuditEntry(
                action="a.second", actor="test", project=None, target="x", at=NOW, details={"k": 1}
            )
        )
        await uow.commit()
    assert second > first > 0
    for statement in (
        "UPDATE audit_log SET actor = 'forger'",
        "DELETE FROM audit_log WHERE seq = :seq",
        *([] if database.is_sqlite else ["TRUNCATE audit_log"]),
    ):
        with pytest.raises(DBAPIError, match="append-only"):
            await _execute_and_commit(uow_factory, statement, {"seq": first})
    async with uow_factory() as uow:
        rows = (await uow.connection.execute(select(t.audit_log).order_by("seq"))).all()
    assert [(row.seq, row.action, row.actor) for row in rows] == [
        (first, "a.first", "test"),
        (second, "a.second", "test"),
    ]


async def _execute_and_commit(
    uow_factory: SqlUnitOfWorkFactory, statement: str, parameters: dict[str, object]
) -> None:
    async with uow_factory() as uow:
        await uow.connection.execute(text(statement), parameters)
        await uow.commit()


async def _add_grant(uow_factory: SqlUnitOfWorkFactory, grant_id: str) -> None:
    async with uow_factory() as uow:
        await uow.projects.add("p", NOW)
        await uow.connection.execute(
            t.grants.insert().values(
                id=grant_id,
                project="p",
                peer_id="peer_1",
                terms={},
                state="active",
                created_at=NOW.isoformat(),
                expires_at=(NOW + timedelta(days=1)).isoformat(),
                requests_used=0,
                transfer_bytes_used=0,
            )
        )
        await uow.commit()


async def test_concurrent_charges_of_one_grant_each_see_the_others_and_all_count(
    database: Database,
) -> None:
    """A charge holds the row until commit: a second charger reads the first's amount."""
    uow_factory = SqlUnitOfWorkFactory(database)
    await _add_grant(uow_factory, "grant_1")
    first_charged = asyncio.Event()
    release_first = asyncio.Event()
    seen: dict[str, int] = {}

    async def first() -> None:
        async with uow_factory() as uow:
            await uow.grants.charge("grant_1", requests=1, transfer_bytes=100)
            first_charged.set()
            await release_first.wait()
            await uow.commit()

    async def second() -> None:
        await first_charged.wait()
        async with uow_factory() as uow:
            await uow.grants.charge("grant_1", requests=1, transfer_bytes=50)
            grant = await uow.connection.execute(
                select(t.grants.c.requests_used, t.grants.c.transfer_bytes_used)
            )
            seen["requests"], seen["bytes"] = grant.one()
            await uow.commit()

    first_task = asyncio.create_task(first())
    second_task = asyncio.create_task(second())
    await first_charged.wait()
    # The second charger must wait for the first: give it every chance to run ahead.
    for _ in range(20):
        await asyncio.sleep(0)
    assert not second_task.done()
    release_first.set()
    await asyncio.wait_for(asyncio.gather(first_task, second_task), timeout=10)
    assert seen == {"requests": 2, "bytes": 150}


Work = Callable[[SqlUnitOfWork], Awaitable[None]]


async def _second_waits_for_first(
    uow_factory: SqlUnitOfWorkFactory, first: Work, second: Work
) -> None:
    """``first`` runs in a transaction held open; ``second``, in another, must still be waiting
    half a second later (time enough to run ahead), and ends once ``first`` commits."""
    first_done = asyncio.Event()
    release_first = asyncio.Event()

    async def run_first() -> None:
        async with uow_factory() as uow:
            await first(uow)
            first_done.set()
            await release_first.wait()
            await uow.commit()

    async def run_second() -> None:
        await first_done.wait()
        async with uow_factory() as uow:
            await second(uow)
            await uow.commit()

    first_task = asyncio.create_task(run_first())
    second_task = asyncio.create_task(run_second())
    try:
        await first_done.wait()
        await asyncio.sleep(0.5)
        assert not second_task.done()
    finally:
        release_first.set()
        await asyncio.wait_for(asyncio.gather(first_task, second_task), timeout=10)


@contextlib.asynccontextmanager
async def _postgresql_database(postgres: PostgresServer, name: str) -> AsyncIterator[Database]:
    database = Database(postgres.database(name))
    await upgrade(database)
    try:
        yield database
    finally:
        await database.dispose()


async def test_creations_under_one_grant_count_one_after_another_on_postgresql(
    postgres: PostgresServer,
) -> None:
    """The 64-record caps: a creation counts what its grant holds, then records its own. Two
    at once under one grant must not both count before either records (each would take the
    last place); the second count waits for the first transaction, then sees its receipt."""
    async with _postgresql_database(postgres, "creation_caps") as database:
        uow_factory = SqlUnitOfWorkFactory(database)
        await _add_grant(uow_factory, "grant_1")
        seen: dict[str, int] = {}

        async def first(uow: SqlUnitOfWork) -> None:
            seen["first"] = await mutations.count_held(uow, "grant_1", "models.create")
            key = MutationKey.grant("grant_1", "a" * 32, "models.create", {"n": 1})
            await (await mutations.begin(uow, key)).complete({"id": "model_1"}, NOW)

        async def second(uow: SqlUnitOfWork) -> None:
            seen["second"] = await mutations.count_held(uow, "grant_1", "models.create")

        await _second_waits_for_first(uow_factory, first, second)
        assert seen == {"first": 0, "second": 1}


async def test_offers_are_admitted_one_at_a_time_under_the_companions_row_on_postgresql(
    postgres: PostgresServer,
) -> None:
    """The offer caps count, then insert: a second admission waits at the companion's row
    until the first commits."""
    async with _postgresql_database(postgres, "offer_caps") as database:
        uow_factory = SqlUnitOfWorkFactory(database)
        async with uow_factory() as uow:
            await uow.settings.put(COMPANION_SETTING, {"agent_directory": "/nowhere"})
            await uow.commit()

        async def admit(uow: SqlUnitOfWork) -> None:
            await uow.settings.lock(COMPANION_SETTING)

        await _second_waits_for_first(uow_factory, admit, admit)
