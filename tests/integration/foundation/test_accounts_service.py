"""Account rules that need a controlled clock, against a real SQLite file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy

from ficc.base.errors import Unauthenticated
from ficc.bootstrap import Settings, lifecycle, open_cluster
from ficc.domain.principals import owner_principal
from ficc.services import accounts


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)


async def test_a_token_expires_at_the_end_of_its_lifetime(tmp_path: Path) -> None:
    clock = FakeClock()
    cluster = await open_cluster(Settings(state_dir=tmp_path / "s"), clock=clock)
    try:
        owner = await accounts.local_owner(cluster.uow_factory)
        issued = await accounts.create_token(
            cluster.uow_factory,
            clock,
            owner,
            scopes=["models:read"],
            projects=["default"],
            lifetime=60,
        )
        assert issued.expires_at == clock.now + timedelta(seconds=60)
        clock.advance(59)
        principal = await accounts.authenticate_token(cluster.uow_factory, clock, issued.token)
        assert principal.scopes == frozenset({"models:read"})
        assert principal.is_owner is False
        clock.advance(1)
        with pytest.raises(Unauthenticated):
            await accounts.authenticate_token(cluster.uow_factory, clock, issued.token)
    finally:
        await lifecycle.close(cluster)


async def test_a_cached_token_is_refused_once_expired_or_revoked(tmp_path: Path) -> None:
    clock = FakeClock()
    cache = accounts.CredentialCache()
    cluster = await open_cluster(Settings(state_dir=tmp_path / "s"), clock=clock)
    try:
        owner = await accounts.local_owner(cluster.uow_factory)
        issued = [
            await accounts.create_token(
                cluster.uow_factory,
                clock,
                owner,
                scopes=["models:read"],
                projects=["default"],
                lifetime=lifetime,
            )
            for lifetime in (60, None)
        ]
        short, kept = issued
        for token in issued:
            await accounts.authenticate_token(cluster.uow_factory, clock, token.token, cache)
        clock.advance(60)
        with pytest.raises(Unauthenticated):
            await accounts.authenticate_token(cluster.uow_factory, clock, short.token, cache)
        token_id = (
            await accounts.authenticate_token(cluster.uow_factory, clock, kept.token, cache)
        ).token_id
        assert token_id is not None
        await accounts.revoke_token(cluster.uow_factory, clock, owner, token_id, cache)
        with pytest.raises(Unauthenticated):
            await accounts.authenticate_token(cluster.uow_factory, clock, kept.token, cache)
    finally:
        await lifecycle.close(cluster)


async def test_a_login_link_expires_after_five_minutes(tmp_path: Path) -> None:
    clock = FakeClock()
    cluster = await open_cluster(Settings(state_dir=tmp_path / "s"), clock=clock)
    try:
        owner = await accounts.local_owner(cluster.uow_factory)
        secret = await accounts.create_login_link(cluster.uow_factory, clock, owner)
        clock.advance(accounts.LOGIN_LINK_LIFETIME_SECONDS)
        with pytest.raises(Unauthenticated):
            await accounts.consume_login_link(cluster.uow_factory, clock, secret)
    finally:
        await lifecycle.close(cluster)


async def test_only_the_local_owner_may_mint_a_login_link(tmp_path: Path) -> None:
    clock = FakeClock()
    cluster = await open_cluster(Settings(state_dir=tmp_path / "s"), clock=clock)
    try:
        owner = await accounts.local_owner(cluster.uow_factory)
        issued = await accounts.create_token(
            cluster.uow_factory,
            clock,
            owner,
            scopes=["tokens:manage"],
            projects=None,
            lifetime=None,
        )
        narrowed = await accounts.authenticate_token(cluster.uow_factory, clock, issued.token)
        from ficc.base.errors import PermissionDenied

        with pytest.raises(PermissionDenied):
            await accounts.create_login_link(cluster.uow_factory, clock, narrowed)
        assert owner == owner_principal(owner.user_id, owner.username, via="socket")
    finally:
        await lifecycle.close(cluster)


async def test_the_audit_log_refuses_updates_and_deletes(tmp_path: Path) -> None:
    cluster = await open_cluster(Settings(state_dir=tmp_path / "s"))
    try:
        connection = await cluster.database.connect()
        try:
            count = (
                await connection.execute(sqlalchemy.text("SELECT count(*) FROM audit_log"))
            ).scalar_one()
            assert count >= 2
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"):
                await connection.execute(sqlalchemy.text("UPDATE audit_log SET actor = 'x'"))
            await connection.rollback()
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"):
                await connection.execute(sqlalchemy.text("DELETE FROM audit_log"))
        finally:
            await connection.close()
    finally:
        await lifecycle.close(cluster)
