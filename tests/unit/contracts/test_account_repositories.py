"""Users, tokens, web sessions and login links behave alike in the fake and in SQL: unique
names and secrets refused twice, revocation and single use that take once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.unit.contracts.records import DUPLICATE, NOW, at, committed, digest, fresh, user

from ficc.domain.accounts import ApiToken, LoginLink, WebSession
from ficc.services.ports import UnitOfWorkFactory


async def test_users_are_found_by_id_and_name_and_a_name_is_taken_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    owner, other = user(owner=True), user()
    async with uow_factory() as uow:
        await uow.users.add(other)
        await uow.users.add(owner)
        await uow.users.set_password_hash(other.id, "argon2-hash")
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.users.get(owner.id) == owner
        assert await uow.users.by_username(other.username) == replace(
            other, password_hash="argon2-hash"
        )
        assert await uow.users.owner() == owner
        assert await uow.users.get(fresh("user")) is None
    with pytest.raises(DUPLICATE):
        await committed(uow_factory, lambda uow: uow.users.add(user(username=other.username)))


def a_token(user_id: str, *, age: float = 0, owner: bool = False) -> ApiToken:
    return ApiToken(
        id=fresh("token"),
        user_id=user_id,
        secret_hash=digest(),
        scopes=frozenset({"models:read", "inference:invoke"}),
        projects=frozenset({"default"}),
        created_at=at(age),
        expires_at=at(age + 60),
        revoked_at=None,
        owner=owner,
        created_by=None,
    )


async def test_tokens_list_oldest_first_revoke_once_and_mark_one_owner(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = user()
    later, first = a_token(holder.id, age=5), a_token(holder.id, age=1)
    async with uow_factory() as uow:
        await uow.users.add(holder)
        await uow.tokens.add(later)
        await uow.tokens.add(first)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.tokens.list() == [first, later]
        assert await uow.tokens.by_secret_hash(later.secret_hash) == later
        await uow.tokens.revoke(first.id, at(10))
        await uow.tokens.revoke(first.id, at(20))
        assert await uow.tokens.mark_owner(later.secret_hash) is True
        assert await uow.tokens.mark_owner(later.secret_hash) is False
        assert await uow.tokens.mark_owner(first.secret_hash) is False
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.tokens.get(first.id) == replace(first, revoked_at=at(10))
        assert await uow.tokens.get(later.id) == replace(later, owner=True)
        assert await uow.tokens.get(fresh("token")) is None


async def test_revoking_what_a_token_minted_walks_the_whole_chain_nearest_first(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """G4: a revoked child is walked through to its own children; the live ones are revoked
    at the moment given, nearest first, and nothing outside the chain is touched."""
    holder = user()
    parent = a_token(holder.id)
    child = replace(a_token(holder.id, age=1), created_by=parent.id)
    revoked_child = replace(a_token(holder.id, age=2), created_by=parent.id, revoked_at=at(3))
    grandchild = replace(a_token(holder.id, age=4), created_by=revoked_child.id)
    stranger = a_token(holder.id, age=5)
    async with uow_factory() as uow:
        await uow.users.add(holder)
        for token in (parent, child, revoked_child, grandchild, stranger):
            await uow.tokens.add(token)
        await uow.commit()
    async with uow_factory() as uow:
        await uow.tokens.lock(parent.id)
        assert list(await uow.tokens.revoke_minted_by(parent.id, at(10))) == [
            child.id,
            grandchild.id,
        ]
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.tokens.get(child.id) == replace(child, revoked_at=at(10))
        assert await uow.tokens.get(grandchild.id) == replace(grandchild, revoked_at=at(10))
        assert await uow.tokens.get(revoked_child.id) == revoked_child
        assert await uow.tokens.get(parent.id) == parent
        assert await uow.tokens.get(stranger.id) == stranger
        assert list(await uow.tokens.revoke_minted_by(stranger.id, at(11))) == []


async def test_sessions_end_one_or_all_of_a_user_but_the_one_kept(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder, other = user(), user()
    sessions = [
        WebSession(fresh("session"), u.id, digest(), digest(), NOW, at(3600))
        for u in (holder, holder, holder, other)
    ]
    async with uow_factory() as uow:
        await uow.users.add(holder)
        await uow.users.add(other)
        for session in sessions:
            await uow.sessions.add(session)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.sessions.by_secret_hash(sessions[1].secret_hash) == sessions[1]
        await uow.sessions.delete(sessions[0].id)
        assert await uow.sessions.delete_for_user(holder.id, keep=sessions[1].id) == 1
        await uow.commit()
    async with uow_factory() as uow:
        found = [await uow.sessions.by_secret_hash(s.secret_hash) for s in sessions]
        assert found == [None, sessions[1], None, sessions[3]]
        assert await uow.sessions.delete_for_user(holder.id, keep=None) == 1


async def test_a_login_link_is_used_once(uow_factory: UnitOfWorkFactory) -> None:
    holder = user()
    link = LoginLink(fresh("login_link"), holder.id, digest(), NOW, at(600), None)
    async with uow_factory() as uow:
        await uow.users.add(holder)
        await uow.login_links.add(link)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.login_links.mark_used(link.id, at(1)) is True
        assert await uow.login_links.mark_used(link.id, at(2)) is False
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.login_links.by_secret_hash(link.secret_hash) == replace(
            link, used_at=at(1)
        )
        assert await uow.login_links.by_secret_hash(digest()) is None
