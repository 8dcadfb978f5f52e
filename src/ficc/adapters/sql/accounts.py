"""Accounts in SQL: users, API tokens, web sessions, login links and projects."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import delete, func, insert, select, update

from ficc.adapters.sql import tables as t
from ficc.adapters.sql.repository import _record, _Records, _Repository, _row_values
from ficc.base.times import format_time, parse_time
from ficc.domain.accounts import ApiToken, LoginLink, User, WebSession

_S = TypeVar("_S", bound=WebSession | LoginLink)


def _rights(row: Any) -> dict[str, frozenset[str]]:
    """A user's or a token's scopes and projects: sets, stored as sorted lists."""
    return {"scopes": frozenset(row.scopes), "projects": frozenset(row.projects)}


def _stored_rights(holder: User | ApiToken) -> dict[str, list[str]]:
    return {"scopes": sorted(holder.scopes), "projects": sorted(holder.projects)}


class SqlUsers(_Records[User]):
    _table = t.users

    def _read(self, row: Any) -> User:
        return _record(User, t.users, row, **_rights(row))

    def _values(self, record: User) -> dict[str, object]:
        return _row_values(record, t.users, **_stored_rights(record))

    async def by_username(self, username: str) -> User | None:
        return await self._one_where("username", username)

    async def owner(self) -> User | None:
        query = select(t.users).where(t.users.c.is_owner.is_(True)).limit(1)
        row = (await self._c.execute(query)).first()
        return None if row is None else self._read(row)

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        await self._update_where(t.users, "id", user_id, {"password_hash": password_hash})


class SqlTokens(_Records[ApiToken]):
    _table = t.api_tokens

    def _read(self, row: Any) -> ApiToken:
        return _record(ApiToken, t.api_tokens, row, owner=bool(row.owner), **_rights(row))

    def _values(self, record: ApiToken) -> dict[str, object]:
        return _row_values(record, t.api_tokens, **_stored_rights(record))

    async def by_secret_hash(self, secret_hash: str) -> ApiToken | None:
        return await self._one_where("secret_hash", secret_hash)

    async def list(self) -> list[ApiToken]:
        return await self._all(select(t.api_tokens).order_by(t.api_tokens.c.created_at))

    async def revoke(self, token_id: str, at: datetime) -> None:
        await self._c.execute(
            update(t.api_tokens)
            .where(t.api_tokens.c.id == token_id, t.api_tokens.c.revoked_at.is_(None))
            .values(revoked_at=format_time(at))
        )

    async def revoke_minted_by(self, token_id: str, at: datetime) -> Sequence[str]:
        """Revoke every token minted by ``token_id``, and theirs, down the ``created_by`` chain;
        the IDs just revoked, nearest first.

        One level per statement, so on PostgreSQL each level reads what committed before it:
        a token minted meanwhile under a child (whose row the mint locks) is found at the next
        level. A child revoked earlier is still walked through to its own children.
        """
        tokens = t.api_tokens.c
        revoked: list[str] = []
        seen = {token_id}
        level = [token_id]
        while level:
            rows = await self._c.execute(
                select(tokens.id, tokens.revoked_at)
                .where(tokens.created_by.in_(level))
                .order_by(tokens.created_at, tokens.id)
            )
            children = [row for row in rows if row.id not in seen]
            live = [row.id for row in children if row.revoked_at is None]
            if live:
                await self._c.execute(
                    update(t.api_tokens)
                    .where(tokens.id.in_(live), tokens.revoked_at.is_(None))
                    .values(revoked_at=format_time(at))
                )
            revoked += live
            level = [row.id for row in children]
            seen.update(level)
        return revoked

    async def lock(self, token_id: str) -> None:
        await self._lock_where(t.api_tokens, "id", token_id)

    async def mark_owner(self, secret_hash: str) -> bool:
        """Mark the unrevoked token with this digest as the owner token; True if just marked."""
        result = await self._c.execute(
            update(t.api_tokens)
            .where(
                t.api_tokens.c.secret_hash == secret_hash,
                t.api_tokens.c.revoked_at.is_(None),
                t.api_tokens.c.owner.is_(False),
            )
            .values(owner=True)
        )
        return result.rowcount == 1


class _SecretKeyed(_Records[_S]):
    """Records (sessions, login links) a holder finds again by the hash of its secret."""

    async def by_secret_hash(self, secret_hash: str) -> _S | None:
        return await self._one_where("secret_hash", secret_hash)


class SqlSessions(_SecretKeyed[WebSession]):
    _table = t.web_sessions

    def _read(self, row: Any) -> WebSession:
        return _record(WebSession, t.web_sessions, row)

    async def delete(self, session_id: str) -> None:
        await self._delete_where(t.web_sessions, "id", session_id)

    async def delete_for_user(self, user_id: str, *, keep: str | None) -> int:
        """End every session of ``user_id`` but ``keep``; the number ended."""
        query = delete(t.web_sessions).where(t.web_sessions.c.user_id == user_id)
        if keep is not None:
            query = query.where(t.web_sessions.c.id != keep)
        return int((await self._c.execute(query)).rowcount)

    async def purge(self, *, now: datetime) -> int:
        """Delete the sessions that have expired; the number deleted."""
        query = delete(t.web_sessions).where(t.web_sessions.c.expires_at <= format_time(now))
        return int((await self._c.execute(query)).rowcount or 0)


class SqlLoginLinks(_SecretKeyed[LoginLink]):
    _table = t.login_links

    def _read(self, row: Any) -> LoginLink:
        return _record(LoginLink, t.login_links, row)

    async def mark_used(self, link_id: str, at: datetime) -> bool:
        result = await self._c.execute(
            update(t.login_links)
            .where(t.login_links.c.id == link_id, t.login_links.c.used_at.is_(None))
            .values(used_at=format_time(at))
        )
        return result.rowcount == 1

    async def purge(self, *, now: datetime) -> int:
        """Delete the links that were used or have expired; the number deleted."""
        links = t.login_links.c
        query = delete(t.login_links).where(
            links.used_at.is_not(None) | (links.expires_at <= format_time(now))
        )
        return int((await self._c.execute(query)).rowcount or 0)


class SqlProjects(_Repository):
    async def add(self, name: str, at: datetime) -> None:
        await self._c.execute(insert(t.projects).values(name=name, created_at=format_time(at)))

    async def exists(self, name: str) -> bool:
        query = select(func.count()).select_from(t.projects).where(t.projects.c.name == name)
        return bool((await self._c.execute(query)).scalar_one())

    async def list(self) -> list[tuple[str, datetime]]:
        rows = await self._c.execute(select(t.projects).order_by(t.projects.c.name))
        return [(row.name, parse_time(row.created_at)) for row in rows]
