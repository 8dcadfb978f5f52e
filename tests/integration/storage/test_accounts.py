"""Tokens, sessions and login links on both backends: a minted token never outlives its
creator, revoking a token revokes what it minted (also while a mint runs at the same moment),
and sessions and login links that can no longer authenticate are purged (G4, F17)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.fakes.clock import FakeClock
from tests.support.postgres import PostgresServer

from ficc.adapters.passwords import Argon2Hasher
from ficc.adapters.sql.database import Database
from ficc.adapters.sql.schema import upgrade
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.base.errors import Unauthenticated
from ficc.domain.accounts import LoginLink, LoginThrottle, WebSession
from ficc.domain.principals import Principal
from ficc.services import accounts

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SCOPES = ["tokens:manage", "models:read"]


async def _owner(uow_factory: SqlUnitOfWorkFactory, clock: FakeClock) -> Principal:
    async with uow_factory() as uow:
        await accounts.ensure_owner(uow, clock)
        await uow.commit()
    return await accounts.Owner(uow_factory).local_owner()


async def _mint(
    uow_factory: SqlUnitOfWorkFactory,
    clock: FakeClock,
    creator: Principal,
    lifetime: int | None = None,
) -> tuple[accounts.IssuedToken, Principal]:
    tokens = accounts.Tokens(uow_factory, clock)
    issued = await tokens.create_token(
        creator, scopes=SCOPES, projects=["default"], lifetime=lifetime
    )
    return issued, await tokens.authenticate_token(issued.token)


async def _revoked(uow_factory: SqlUnitOfWorkFactory, *token_ids: str) -> list[bool]:
    async with uow_factory() as uow:
        tokens = [await uow.tokens.get(token_id) for token_id in token_ids]
    return [token is not None and token.revoked_at is not None for token in tokens]


async def test_a_minted_token_expires_no_later_than_the_token_that_minted_it(
    database: Database,
) -> None:
    uow_factory = SqlUnitOfWorkFactory(database)
    clock = FakeClock(NOW)
    owner = await _owner(uow_factory, clock)
    parent, parent_principal = await _mint(uow_factory, clock, owner, lifetime=60)
    assert parent.expires_at == NOW + timedelta(seconds=60)
    clock.advance(10)
    never, never_principal = await _mint(uow_factory, clock, parent_principal, lifetime=None)
    longer, _ = await _mint(uow_factory, clock, parent_principal, lifetime=3600)
    shorter, _ = await _mint(uow_factory, clock, parent_principal, lifetime=5)
    grandchild, _ = await _mint(uow_factory, clock, never_principal, lifetime=86_400)
    assert [never.expires_at, longer.expires_at, grandchild.expires_at] == [parent.expires_at] * 3
    assert shorter.expires_at == NOW + timedelta(seconds=15)
    clock.advance(50)
    for issued in (parent, never, longer, grandchild):
        with pytest.raises(Unauthenticated):
            await accounts.Tokens(uow_factory, clock).authenticate_token(issued.token)
    # The owner's own tokens (minted by the socket or a session) keep the lifetime asked.
    unbounded, _ = await _mint(uow_factory, clock, owner, lifetime=None)
    assert unbounded.expires_at is None


async def test_revoking_a_token_revokes_every_token_it_minted_and_theirs_in_one_change(
    database: Database,
) -> None:
    uow_factory = SqlUnitOfWorkFactory(database)
    clock = FakeClock(NOW)
    owner = await _owner(uow_factory, clock)
    parent, parent_principal = await _mint(uow_factory, clock, owner)
    child, child_principal = await _mint(uow_factory, clock, parent_principal)
    sibling, _ = await _mint(uow_factory, clock, parent_principal)
    grandchild, _ = await _mint(uow_factory, clock, child_principal)
    unrelated, _ = await _mint(uow_factory, clock, owner)
    cached = accounts.Tokens(uow_factory, clock, accounts.CredentialCache())
    for issued in (parent, child, sibling, grandchild, unrelated):
        await cached.authenticate_token(issued.token)

    await cached.revoke_token(owner, parent.id)
    assert await _revoked(uow_factory, parent.id, child.id, sibling.id, grandchild.id) == [True] * 4
    for issued in (parent, child, sibling, grandchild):
        with pytest.raises(Unauthenticated):
            await cached.authenticate_token(issued.token)
    await cached.authenticate_token(unrelated.token)
    async with uow_factory() as uow:
        entries = await uow.audit.list(project=None, after_seq=0, limit=100)
    revoked = [entry for entry in entries if entry.action == "token.revoked"]
    assert [entry.target for entry in revoked] == [parent.id]
    named = revoked[0].details["minted_tokens_revoked"]
    assert sorted(named[:2]) == sorted([child.id, sibling.id])  # nearest first
    assert named[2:] == [grandchild.id]


async def test_a_token_revoked_after_it_authenticated_mints_nothing(database: Database) -> None:
    """The request authenticated before the revocation committed: the mint reads the creator
    again inside its own transaction and refuses."""
    uow_factory = SqlUnitOfWorkFactory(database)
    clock = FakeClock(NOW)
    owner = await _owner(uow_factory, clock)
    parent, parent_principal = await _mint(uow_factory, clock, owner)
    await accounts.Tokens(uow_factory, clock).revoke_token(owner, parent.id)
    async with uow_factory() as uow:
        before = len(await uow.tokens.list())
    with pytest.raises(Unauthenticated):
        await _mint(uow_factory, clock, parent_principal)
    async with uow_factory() as uow:
        assert len(await uow.tokens.list()) == before


async def _started(event: asyncio.Event, task: asyncio.Task[None]) -> None:
    """Wait until ``task`` sets ``event``; a task that fails first fails the test with its error."""
    waiting = asyncio.create_task(event.wait())
    await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
    if not event.is_set():
        waiting.cancel()
        await task  # raises its error
        raise AssertionError("the task ended without reaching its point")


@contextlib.asynccontextmanager
async def _postgresql_database(postgres: PostgresServer, name: str) -> AsyncIterator[Database]:
    database = Database(postgres.database(name))
    await upgrade(database)
    try:
        yield database
    finally:
        await database.dispose()


async def test_a_revocation_running_while_a_child_mints_revokes_the_new_token_on_postgresql(
    postgres: PostgresServer,
) -> None:
    """The mint holds its creator's row; the cascade waits at that row, then reads the next
    level afresh and finds the token minted meanwhile."""
    async with _postgresql_database(postgres, "token_cascade") as database:
        uow_factory = SqlUnitOfWorkFactory(database)
        clock = FakeClock(NOW)
        owner = await _owner(uow_factory, clock)
        parent, parent_principal = await _mint(uow_factory, clock, owner)
        child, child_principal = await _mint(uow_factory, clock, parent_principal)
        minting = asyncio.Event()
        release = asyncio.Event()
        minted: list[str] = []

        async def mint_under_child() -> None:
            async with uow_factory() as uow:
                await uow.tokens.lock(child.id)
                user = await uow.users.get(child_principal.user_id)
                assert user is not None
                issued = await accounts.mint_token(
                    uow,
                    clock,
                    user=user,
                    scopes=frozenset(SCOPES),
                    projects=frozenset({"default"}),
                    lifetime_seconds=None,
                    actor="test",
                    created_by=child.id,
                )
                minted.append(issued.id)
                minting.set()
                await release.wait()
                await uow.commit()

        mint_task = asyncio.create_task(mint_under_child())
        await _started(minting, mint_task)
        revoke_task = asyncio.create_task(
            accounts.Tokens(uow_factory, clock).revoke_token(owner, parent.id)
        )
        try:
            await asyncio.sleep(0.5)  # time enough for the revocation to run ahead
            assert not revoke_task.done()
        finally:
            release.set()
            await asyncio.wait_for(asyncio.gather(mint_task, revoke_task), timeout=10)
        assert await _revoked(uow_factory, parent.id, child.id, minted[0]) == [True] * 3


async def test_a_mint_running_while_its_creator_is_revoked_waits_and_is_refused_on_postgresql(
    postgres: PostgresServer,
) -> None:
    async with _postgresql_database(postgres, "token_mint_waits") as database:
        uow_factory = SqlUnitOfWorkFactory(database)
        clock = FakeClock(NOW)
        owner = await _owner(uow_factory, clock)
        parent, parent_principal = await _mint(uow_factory, clock, owner)
        child, child_principal = await _mint(uow_factory, clock, parent_principal)
        revoking = asyncio.Event()
        release = asyncio.Event()

        async def revoke_parent() -> None:
            async with uow_factory() as uow:
                await uow.tokens.revoke(parent.id, clock())
                assert await uow.tokens.revoke_minted_by(parent.id, clock()) == [child.id]
                revoking.set()
                await release.wait()
                await uow.commit()

        revoke_task = asyncio.create_task(revoke_parent())
        await _started(revoking, revoke_task)
        mint_task = asyncio.create_task(_mint(uow_factory, clock, child_principal))
        try:
            await asyncio.sleep(0.5)  # time enough for the mint to run ahead
            assert not mint_task.done()
        finally:
            release.set()
            await asyncio.wait_for(revoke_task, timeout=10)
        with pytest.raises(Unauthenticated):
            await asyncio.wait_for(mint_task, timeout=10)
        async with uow_factory() as uow:
            assert {token.created_by for token in await uow.tokens.list()} == {None, parent.id}


async def test_expired_sessions_and_used_or_expired_login_links_are_purged(
    database: Database,
) -> None:
    uow_factory = SqlUnitOfWorkFactory(database)
    clock = FakeClock(NOW)
    owner = await _owner(uow_factory, clock)
    hour = timedelta(hours=1)
    async with uow_factory() as uow:
        for name, expires_at in (("old", NOW - hour), ("now", NOW), ("live", NOW + hour)):
            await uow.sessions.add(
                WebSession(
                    f"session_{name}", owner.user_id, f"s{name}", "c", NOW - hour, expires_at
                )
            )
        for name, expires_at, used_at in (
            ("expired", NOW - hour, None),
            ("used", NOW + hour, NOW - hour),
            ("open", NOW + hour, None),
        ):
            await uow.login_links.add(
                LoginLink(
                    f"link_{name}", owner.user_id, f"l{name}", NOW - hour, expires_at, used_at
                )
            )
        await uow.commit()

    sessions = accounts.Sessions(uow_factory, clock, Argon2Hasher(), LoginThrottle())
    assert await sessions.purge_expired() == 4
    async with uow_factory() as uow:
        assert await uow.sessions.by_secret_hash("slive") is not None
        assert await uow.login_links.by_secret_hash("lopen") is not None
        for gone in ("sold", "snow"):
            assert await uow.sessions.by_secret_hash(gone) is None
        for gone in ("lexpired", "lused"):
            assert await uow.login_links.by_secret_hash(gone) is None
    assert await sessions.purge_expired() == 0
