"""Browser sessions: password login, the session cookie's principal, logout, the password.

Passwords use the injected (slow) hasher, off the event loop and with no transaction open.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from ficc.base.errors import InvalidInput, Unauthenticated
from ficc.domain.accounts import (
    MAX_PASSWORD_CHARS,
    SESSION_LIFETIME_SECONDS,
    LoginThrottle,
    User,
    WebSession,
)
from ficc.domain.principals import Principal, owner_principal
from ficc.services import audit
from ficc.services.accounts.credentials import digest, new_record_id, record_change
from ficc.services.ports import Clock, PasswordHasher, UnitOfWork, UnitOfWorkFactory


@dataclass(frozen=True)
class IssuedSession:
    secret: str
    csrf_token: str
    expires_at: datetime
    principal: Principal


async def open_session(
    uow: UnitOfWork, clock: Clock, user: User, actor: str, lifetime_seconds: int
) -> IssuedSession:
    now = clock()
    secret = secrets.token_urlsafe(32)
    session = WebSession(
        id=new_record_id("session"),
        user_id=user.id,
        secret_hash=digest(secret),
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        expires_at=now + timedelta(seconds=lifetime_seconds),
    )
    await uow.sessions.add(session)
    await audit.record(
        uow, clock, action="session.created", actor=actor, project=None, target=session.id
    )
    principal = _session_principal(user, session)
    return IssuedSession(secret, session.csrf_token, session.expires_at, principal)


def _session_principal(user: User, session: WebSession) -> Principal:
    if user.is_owner:
        base = owner_principal(user.id, user.username, via="session")
    else:
        base = Principal(
            user_id=user.id,
            username=user.username,
            scopes=user.scopes,
            projects=user.projects,
            is_owner=False,
            via="session",
        )
    return dataclasses.replace(base, session_id=session.id)


@dataclass(frozen=True, eq=False)
class Sessions:
    """Browser sessions: password login behind the throttle, the cookie's principal, logout,
    the owner's password, and the purge of what can never authenticate again."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    hasher: PasswordHasher
    throttle: LoginThrottle

    async def login(
        self,
        *,
        address: str,
        username: str,
        password: str,
        lifetime_seconds: int = SESSION_LIFETIME_SECONDS,
    ) -> IssuedSession:
        """Password login; the same refusal for an unknown user and a wrong password.

        The throttle admits the try before anything slow runs, and the hash is checked off the
        event loop with no transaction open, so a flood of logins neither stalls the loop nor
        holds the database.
        """
        refused = Unauthenticated("the username or password is wrong")
        self.throttle.begin(address, self.clock())
        succeeded = False
        try:
            if len(password) > MAX_PASSWORD_CHARS:
                raise refused
            async with self.uow_factory() as uow:
                user = await uow.users.by_username(username)
            if user is None or user.password_hash is None:
                raise refused
            if not await self.hasher.verify(user.password_hash, password):
                raise refused
            async with self.uow_factory() as uow:
                issued = await open_session(
                    uow, self.clock, user, f"{user.username}:password", lifetime_seconds
                )
                await uow.commit()
            succeeded = True
            return issued
        finally:
            self.throttle.end(address, self.clock(), succeeded=succeeded)

    async def authenticate_session(self, secret: str) -> tuple[Principal, str]:
        """The principal and CSRF token of a session cookie."""
        async with self.uow_factory() as uow:
            session = await uow.sessions.by_secret_hash(digest(secret))
            if session is None or self.clock() >= session.expires_at:
                raise Unauthenticated("the session is unknown or expired; log in again")
            user = await uow.users.get(session.user_id)
        if user is None:
            raise Unauthenticated("the session is unknown or expired; log in again")
        return _session_principal(user, session), session.csrf_token

    async def logout(self, principal: Principal) -> None:
        if principal.session_id is None:
            raise InvalidInput("only a browser session can be logged out", field="session")
        async with self.uow_factory() as uow:
            await uow.sessions.delete(principal.session_id)
            await record_change(uow, self.clock, principal, "session.deleted", principal.session_id)
            await uow.commit()

    async def set_password(self, principal: Principal, password: str) -> None:
        """The local owner sets the owner's password (for password login in the browser);
        every other session of the owner ends."""
        principal.require_local_owner()
        if not 12 <= len(password) <= MAX_PASSWORD_CHARS:
            raise InvalidInput(
                f"password must be 12 to {MAX_PASSWORD_CHARS} characters", field="password"
            )
        password_hash = await self.hasher.hash(password)
        async with self.uow_factory() as uow:
            await uow.users.set_password_hash(principal.user_id, password_hash)
            # Whoever knew the old password may hold a session: every other one ends now.
            ended = await uow.sessions.delete_for_user(principal.user_id, keep=principal.session_id)
            await record_change(
                uow,
                self.clock,
                principal,
                "password.set",
                principal.user_id,
                {"sessions_ended": ended},
            )
            await uow.commit()

    async def purge_expired(self) -> int:
        """Delete expired sessions and used or expired login links; they can never
        authenticate again, and the tables would otherwise grow with every login."""
        now = self.clock()
        async with self.uow_factory() as uow:
            purged = await uow.sessions.purge(now=now) + await uow.login_links.purge(now=now)
            if purged:
                await uow.commit()
        return purged
