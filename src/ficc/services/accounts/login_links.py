"""One-time login links: a short-lived secret that opens an owner session, used once."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from ficc.base.errors import Unauthenticated
from ficc.domain.accounts import LOGIN_LINK_LIFETIME_SECONDS, SESSION_LIFETIME_SECONDS, LoginLink
from ficc.domain.principals import Principal
from ficc.services.accounts.credentials import digest, new_record_id, record_change
from ficc.services.accounts.sessions import IssuedSession, open_session
from ficc.services.ports import Clock, UnitOfWorkFactory


@dataclass(frozen=True, eq=False)
class LoginLinks:
    """One-time login links: made by the local owner, each opening one owner session."""

    uow_factory: UnitOfWorkFactory
    clock: Clock

    async def create_login_link(self, principal: Principal) -> str:
        """A one-time secret that opens an owner session; short-lived and single use."""
        principal.require_local_owner()
        now = self.clock()
        secret = secrets.token_urlsafe(32)
        async with self.uow_factory() as uow:
            link = LoginLink(
                id=new_record_id("login_link"),
                user_id=principal.user_id,
                secret_hash=digest(secret),
                created_at=now,
                expires_at=now + timedelta(seconds=LOGIN_LINK_LIFETIME_SECONDS),
                used_at=None,
            )
            await uow.login_links.add(link)
            await record_change(uow, self.clock, principal, "login_link.created", link.id)
            await uow.commit()
        return secret

    async def consume_login_link(
        self, secret: str, lifetime_seconds: int = SESSION_LIFETIME_SECONDS
    ) -> IssuedSession:
        refused = Unauthenticated("this login link is unknown, expired or already used")
        async with self.uow_factory() as uow:
            link = await uow.login_links.by_secret_hash(digest(secret))
            now = self.clock()
            if link is None or link.used_at is not None or now >= link.expires_at:
                raise refused
            if not await uow.login_links.mark_used(link.id, now):
                raise refused
            user = await uow.users.get(link.user_id)
            if user is None:
                raise refused
            issued = await open_session(
                uow, self.clock, user, f"{user.username}:{link.id}", lifetime_seconds
            )
            await uow.commit()
        return issued
