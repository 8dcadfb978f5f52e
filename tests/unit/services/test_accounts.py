"""Account rules that need a controlled clock: token lifetimes, the credential cache, login
links, who may mint one. In process over fakes; the audit log's append-only trigger is
tested on SQLite in tests/integration/foundation/test_accounts_service.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.cluster import fake_cluster

from ficc.base.errors import PermissionDenied, Unauthenticated
from ficc.bootstrap import lifecycle
from ficc.domain.accounts import LOGIN_LINK_LIFETIME_SECONDS
from ficc.domain.principals import owner_principal
from ficc.services import accounts

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_token_expires_at_the_end_of_its_lifetime(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    cluster = await fake_cluster(tmp_path, clock=clock)
    try:
        tokens = accounts.Tokens(cluster.uow_factory, clock)  # no cache: the database each time
        owner = await cluster.accounts.owner.local_owner()
        issued = await tokens.create_token(
            owner,
            scopes=["models:read"],
            projects=["default"],
            lifetime=60,
        )
        assert issued.expires_at == clock.now + timedelta(seconds=60)
        clock.advance(59)
        principal = await tokens.authenticate_token(issued.token)
        assert principal.scopes == frozenset({"models:read"})
        assert principal.is_owner is False
        clock.advance(1)
        with pytest.raises(Unauthenticated):
            await tokens.authenticate_token(issued.token)
    finally:
        await lifecycle.close(cluster)


async def test_a_cached_token_is_refused_once_expired_or_revoked(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    cache = accounts.CredentialCache()
    cluster = await fake_cluster(tmp_path, clock=clock)
    try:
        tokens = accounts.Tokens(cluster.uow_factory, clock, cache)
        owner = await cluster.accounts.owner.local_owner()
        issued = [
            await tokens.create_token(
                owner,
                scopes=["models:read"],
                projects=["default"],
                lifetime=lifetime,
            )
            for lifetime in (60, None)
        ]
        short, kept = issued
        for token in issued:
            await tokens.authenticate_token(token.token)
        clock.advance(60)
        with pytest.raises(Unauthenticated):
            await tokens.authenticate_token(short.token)
        token_id = (await tokens.authenticate_token(kept.token)).token_id
        assert token_id is not None
        await tokens.revoke_token(owner, token_id)
        with pytest.raises(Unauthenticated):
            await tokens.authenticate_token(kept.token)
    finally:
        await lifecycle.close(cluster)


async def test_a_login_link_expires_after_five_minutes(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    cluster = await fake_cluster(tmp_path, clock=clock)
    try:
        owner = await cluster.accounts.owner.local_owner()
        secret = await cluster.accounts.login_links.create_login_link(owner)
        clock.advance(LOGIN_LINK_LIFETIME_SECONDS)
        with pytest.raises(Unauthenticated):
            await cluster.accounts.login_links.consume_login_link(secret)
    finally:
        await lifecycle.close(cluster)


async def test_only_the_local_owner_may_mint_a_login_link(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    cluster = await fake_cluster(tmp_path, clock=clock)
    try:
        tokens = cluster.accounts.tokens
        owner = await cluster.accounts.owner.local_owner()
        issued = await tokens.create_token(
            owner,
            scopes=["tokens:manage"],
            projects=None,
            lifetime=None,
        )
        narrowed = await tokens.authenticate_token(issued.token)
        with pytest.raises(PermissionDenied):
            await cluster.accounts.login_links.create_login_link(narrowed)
        assert owner == owner_principal(owner.user_id, owner.username, via="socket")
    finally:
        await lifecycle.close(cluster)
