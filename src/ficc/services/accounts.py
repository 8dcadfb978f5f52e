"""Accounts: the owner, API tokens, password sessions and one-time login links.

Secrets are shown once and stored only as SHA-256 digests: they carry 256 bits of entropy,
so a slow password hash would add nothing. Passwords use the injected (slow) hasher.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from ficc.base.errors import InvalidInput, NotFound, PermissionDenied, Unauthenticated
from ficc.base.ids import new_id, parse_project_name
from ficc.domain.accounts import (
    LOGIN_LINK_LIFETIME_SECONDS,
    MAX_PASSWORD_CHARS,
    OWNER_USERNAME,
    SESSION_LIFETIME_SECONDS,
    ApiToken,
    LoginLink,
    LoginThrottle,
    User,
    WebSession,
    parse_lifetime_seconds,
)
from ficc.domain.principals import ALL_PROJECTS, Principal, owner_principal
from ficc.domain.scopes import LOCAL_SCOPES, parse_scopes
from ficc.services import audit
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory

TOKEN_PREFIX = "ficc_"  # noqa: S105 - a prefix, not a secret
DEFAULT_PROJECT = "default"


class PasswordHasher(Protocol):
    """A slow hash; both calls run off the event loop (the adapter bounds how many at once)."""

    async def hash(self, password: str) -> str: ...
    async def verify(self, password_hash: str, password: str) -> bool: ...


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _new(kind: str) -> str:
    return new_id(kind, secrets.token_bytes(16))


@dataclass(frozen=True)
class IssuedToken:
    id: str
    token: str
    scopes: frozenset[str]
    projects: frozenset[str]
    expires_at: datetime | None


@dataclass(frozen=True)
class IssuedSession:
    secret: str
    csrf_token: str
    expires_at: datetime
    principal: Principal


async def ensure_owner(uow: UnitOfWork, clock: Clock) -> tuple[User, bool]:
    """The owner account and the default project exist after this; True if just made."""
    if not await uow.projects.exists(DEFAULT_PROJECT):
        await uow.projects.add(DEFAULT_PROJECT, clock())
    owner = await uow.users.owner()
    if owner is not None:
        return owner, False
    owner = User(
        id=_new("user"),
        username=OWNER_USERNAME,
        password_hash=None,
        is_owner=True,
        scopes=frozenset(LOCAL_SCOPES),
        projects=frozenset({ALL_PROJECTS}),
        created_at=clock(),
    )
    await uow.users.add(owner)
    await audit.record(
        uow, clock, action="owner.created", actor="init", project=None, target=owner.id
    )
    return owner, True


async def mint_token(
    uow: UnitOfWork,
    clock: Clock,
    *,
    user: User,
    scopes: frozenset[str],
    projects: frozenset[str],
    lifetime_seconds: int | None,
    actor: str,
    owner: bool = False,
    created_by: str | None = None,
    not_after: datetime | None = None,
) -> IssuedToken:
    """Create a token inside the caller's transaction and return its secret (shown once).

    ``owner`` is for ``ficc init``'s token only: the one token that is the local owner.
    ``not_after`` caps the expiry (the creator's own), whatever lifetime was asked.
    """
    now = clock()
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = None if lifetime_seconds is None else now + timedelta(seconds=lifetime_seconds)
    if not_after is not None and (expires_at is None or expires_at > not_after):
        expires_at = not_after
    token = ApiToken(
        id=_new("token"),
        user_id=user.id,
        secret_hash=_digest(secret),
        scopes=scopes,
        projects=projects,
        created_at=now,
        expires_at=expires_at,
        revoked_at=None,
        owner=owner,
        created_by=created_by,
    )
    await uow.tokens.add(token)
    await audit.record(
        uow,
        clock,
        action="token.created",
        actor=actor,
        project=None,
        target=token.id,
        details={"scopes": sorted(scopes), "projects": sorted(projects)},
    )
    return IssuedToken(token.id, secret, scopes, projects, expires_at)


async def create_token(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    principal: Principal,
    *,
    scopes: object,
    projects: object,
    lifetime: object,
) -> IssuedToken:
    """A token never holds more than its creator: scopes and projects are subsets, and it
    expires no later than the token that mints it (revoking that one revokes it too)."""
    wanted_scopes = parse_scopes(scopes)
    beyond = sorted(wanted_scopes - principal.scopes)
    if beyond:
        raise PermissionDenied(
            f"a token cannot hold the scope {beyond[0]}, which its creator lacks",
            details={"missing_scope": beyond[0]},
        )
    if projects is None:
        projects = [DEFAULT_PROJECT]
    if not isinstance(projects, list) or not projects:
        raise InvalidInput("projects must be a non-empty list of project names", field="projects")
    names = frozenset(
        parse_project_name(name, field=f"projects[{index}]") for index, name in enumerate(projects)
    )
    lifetime_seconds = parse_lifetime_seconds(lifetime)
    async with uow_factory() as uow:
        for name in sorted(names):
            if not await uow.projects.exists(name):
                raise InvalidInput(f"projects names an unknown project {name}", field="projects")
            principal.require_project(name)
        user = await uow.users.get(principal.user_id)
        if user is None:
            raise Unauthenticated("the credential's user no longer exists")
        not_after = await _creator_expiry(uow, clock, principal)
        issued = await mint_token(
            uow,
            clock,
            user=user,
            scopes=wanted_scopes,
            projects=names,
            lifetime_seconds=lifetime_seconds,
            actor=audit.actor_of(principal),
            created_by=principal.token_id,
            not_after=not_after,
        )
        await uow.commit()
    return issued


async def _creator_expiry(uow: UnitOfWork, clock: Clock, principal: Principal) -> datetime | None:
    """The expiry of the token minting one (None: it never expires, or no token mints).

    The creator's row is locked and read again inside the minting transaction: a revocation
    committed meanwhile refuses the mint, and one still running waits for it and then finds
    the new token among the creator's children.
    """
    if principal.token_id is None:
        return None
    await uow.tokens.lock(principal.token_id)
    creator = await uow.tokens.get(principal.token_id)
    if creator is None or not creator.usable_at(clock()):
        raise Unauthenticated("the bearer token is unknown, expired or revoked")
    return creator.expires_at


async def adopt_owner_token(uow: UnitOfWork, secret: str) -> bool:
    """Mark the token written to ``owner.token`` as the owner token (databases made before
    tokens carried the mark); True if it was just marked."""
    return await uow.tokens.mark_owner(_digest(secret))


async def revoke_token(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    principal: Principal,
    token_id: str,
    cache: CredentialCache | None = None,
) -> None:
    """Revoke a token whose projects are all among the caller's (the local owner: any), and
    in the same transaction every token it minted, and theirs, down the ``created_by`` chain.

    Any other token is answered as unknown, so a caller learns nothing of tokens beyond its
    projects; the owner token is beyond every credential but the owner's.
    """
    async with uow_factory() as uow:
        token = await uow.tokens.get(token_id)
        if token is None or not _may_revoke(principal, token):
            raise NotFound(f"no token {token_id} among the tokens this credential may revoke")
        now = clock()
        await uow.tokens.revoke(token_id, now)
        descendants = await uow.tokens.revoke_minted_by(token_id, now)
        await audit.record(
            uow,
            clock,
            action="token.revoked",
            actor=audit.actor_of(principal),
            project=None,
            target=token_id,
            details={"minted_tokens_revoked": list(descendants)},
        )
        await uow.commit()
    if cache is not None:
        cache.clear()


async def list_tokens(
    uow_factory: UnitOfWorkFactory, clock: Clock, principal: Principal
) -> list[dict[str, Any]]:
    """The tokens this credential may revoke (the local owner: all), never their secrets."""
    now = clock()
    async with uow_factory() as uow:
        tokens = await uow.tokens.list()
    return [_token_json(token, now) for token in tokens if _may_revoke(principal, token)]


def _token_json(token: ApiToken, now: datetime) -> dict[str, Any]:
    if token.revoked_at is not None:
        state = "revoked"
    elif token.usable_at(now):
        state = "active"
    else:
        state = "expired"
    return {
        "id": token.id,
        "state": state,
        "scopes": sorted(token.scopes),
        "projects": sorted(token.projects),
        "owner": token.owner,
        "created_by": token.created_by,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "revoked_at": token.revoked_at,
    }


def _may_revoke(principal: Principal, token: ApiToken) -> bool:
    if principal.is_owner:
        return True
    if token.owner or ALL_PROJECTS in token.projects:
        return False
    return all(principal.admitted_to(project) for project in token.projects)


def _principal_of(user: User, scopes: frozenset[str], projects: frozenset[str]) -> Principal:
    return Principal(
        user_id=user.id,
        username=user.username,
        scopes=scopes & user.scopes,
        projects=projects,
        is_owner=user.is_owner,
        via="token",
    )


class CredentialCache:
    """Principals of recently used tokens, so a request needs no database read to authenticate.

    Exact, not eventually consistent: tokens are revoked only through this process, which
    clears the cache then, and a cached token's expiry is checked at every use.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self._max_entries = max_entries
        self._entries: dict[str, tuple[Principal, datetime | None]] = {}

    def get(self, digest: str, now: datetime) -> Principal | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        principal, expires_at = entry
        if expires_at is not None and now >= expires_at:
            del self._entries[digest]
            return None
        return principal

    def put(self, digest: str, principal: Principal, expires_at: datetime | None) -> None:
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[digest] = (principal, expires_at)

    def clear(self) -> None:
        self._entries.clear()


async def authenticate_token(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    secret: str,
    cache: CredentialCache | None = None,
) -> Principal:
    if not secret.startswith(TOKEN_PREFIX):
        raise Unauthenticated("the bearer token is not a FICC token")
    digest = _digest(secret)
    if cache is not None and (cached := cache.get(digest, clock())) is not None:
        return cached
    async with uow_factory() as uow:
        token = await uow.tokens.by_secret_hash(_digest(secret))
        if token is None or not token.usable_at(clock()):
            raise Unauthenticated("the bearer token is unknown, expired or revoked")
        user = await uow.users.get(token.user_id)
    if user is None:
        raise Unauthenticated("the bearer token is unknown, expired or revoked")
    base = _principal_of(user, token.scopes, token.projects)
    principal = Principal(
        user_id=base.user_id,
        username=base.username,
        scopes=base.scopes,
        projects=base.projects,
        # Only the token `ficc init` wrote is the local owner, never a token minted later.
        is_owner=user.is_owner and token.owner,
        via="token",
        token_id=token.id,
    )
    if cache is not None:
        cache.put(digest, principal, token.expires_at)
    return principal


async def _open_session(
    uow: UnitOfWork, clock: Clock, user: User, actor: str, lifetime_seconds: int
) -> IssuedSession:
    now = clock()
    secret = secrets.token_urlsafe(32)
    session = WebSession(
        id=_new("session"),
        user_id=user.id,
        secret_hash=_digest(secret),
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
    return Principal(
        user_id=base.user_id,
        username=base.username,
        scopes=base.scopes,
        projects=base.projects,
        is_owner=base.is_owner,
        via="session",
        session_id=session.id,
    )


async def login(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    hasher: PasswordHasher,
    throttle: LoginThrottle,
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
    throttle.begin(address, clock())
    succeeded = False
    try:
        if len(password) > MAX_PASSWORD_CHARS:
            raise refused
        async with uow_factory() as uow:
            user = await uow.users.by_username(username)
        if user is None or user.password_hash is None:
            raise refused
        if not await hasher.verify(user.password_hash, password):
            raise refused
        async with uow_factory() as uow:
            issued = await _open_session(
                uow, clock, user, f"{user.username}:password", lifetime_seconds
            )
            await uow.commit()
        succeeded = True
        return issued
    finally:
        throttle.end(address, clock(), succeeded=succeeded)


async def authenticate_session(
    uow_factory: UnitOfWorkFactory, clock: Clock, secret: str
) -> tuple[Principal, str]:
    """The principal and CSRF token of a session cookie."""
    async with uow_factory() as uow:
        session = await uow.sessions.by_secret_hash(_digest(secret))
        if session is None or clock() >= session.expires_at:
            raise Unauthenticated("the session is unknown or expired; log in again")
        user = await uow.users.get(session.user_id)
    if user is None:
        raise Unauthenticated("the session is unknown or expired; log in again")
    return _session_principal(user, session), session.csrf_token


async def logout(uow_factory: UnitOfWorkFactory, clock: Clock, principal: Principal) -> None:
    if principal.session_id is None:
        raise InvalidInput("only a browser session can be logged out", field="session")
    async with uow_factory() as uow:
        await uow.sessions.delete(principal.session_id)
        await audit.record(
            uow,
            clock,
            action="session.deleted",
            actor=audit.actor_of(principal),
            project=None,
            target=principal.session_id,
        )
        await uow.commit()


async def create_login_link(
    uow_factory: UnitOfWorkFactory, clock: Clock, principal: Principal
) -> str:
    """A one-time secret that opens an owner session; short-lived and single use."""
    principal.require_local_owner()
    now = clock()
    secret = secrets.token_urlsafe(32)
    async with uow_factory() as uow:
        link = LoginLink(
            id=_new("login_link"),
            user_id=principal.user_id,
            secret_hash=_digest(secret),
            created_at=now,
            expires_at=now + timedelta(seconds=LOGIN_LINK_LIFETIME_SECONDS),
            used_at=None,
        )
        await uow.login_links.add(link)
        await audit.record(
            uow,
            clock,
            action="login_link.created",
            actor=audit.actor_of(principal),
            project=None,
            target=link.id,
        )
        await uow.commit()
    return secret


async def consume_login_link(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    secret: str,
    lifetime_seconds: int = SESSION_LIFETIME_SECONDS,
) -> IssuedSession:
    refused = Unauthenticated("this login link is unknown, expired or already used")
    async with uow_factory() as uow:
        link = await uow.login_links.by_secret_hash(_digest(secret))
        now = clock()
        if link is None or link.used_at is not None or now >= link.expires_at:
            raise refused
        if not await uow.login_links.mark_used(link.id, now):
            raise refused
        user = await uow.users.get(link.user_id)
        if user is None:
            raise refused
        issued = await _open_session(
            uow, clock, user, f"{user.username}:{link.id}", lifetime_seconds
        )
        await uow.commit()
    return issued


async def set_password(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    hasher: PasswordHasher,
    principal: Principal,
    password: str,
) -> None:
    """The local owner sets the owner's password (for password login in the browser); every
    other session of the owner ends."""
    principal.require_local_owner()
    if not 12 <= len(password) <= MAX_PASSWORD_CHARS:
        raise InvalidInput(
            f"password must be 12 to {MAX_PASSWORD_CHARS} characters", field="password"
        )
    password_hash = await hasher.hash(password)
    async with uow_factory() as uow:
        await uow.users.set_password_hash(principal.user_id, password_hash)
        # Whoever knew the old password may hold a session: every other one ends now.
        ended = await uow.sessions.delete_for_user(principal.user_id, keep=principal.session_id)
        await audit.record(
            uow,
            clock,
            action="password.set",
            actor=audit.actor_of(principal),
            project=None,
            target=principal.user_id,
            details={"sessions_ended": ended},
        )
        await uow.commit()


async def purge_expired(uow_factory: UnitOfWorkFactory, clock: Clock) -> int:
    """Delete expired sessions and used or expired login links; they can never authenticate
    again, and the tables would otherwise grow with every login."""
    now = clock()
    async with uow_factory() as uow:
        purged = await uow.sessions.purge(now=now) + await uow.login_links.purge(now=now)
        if purged:
            await uow.commit()
    return purged


async def local_owner(uow_factory: UnitOfWorkFactory) -> Principal:
    """The principal of the control socket: the owner, with every scope."""
    async with uow_factory() as uow:
        owner = await uow.users.owner()
    if owner is None:
        raise Unauthenticated("this cluster has no owner; run `ficc init`")
    return owner_principal(owner.id, owner.username, via="socket")
