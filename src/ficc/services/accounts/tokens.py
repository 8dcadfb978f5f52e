"""API tokens: minted within their creator's rights, revoked down the chain they minted,
and authenticated from a cache that revocation clears."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Protocol

from ficc.base.errors import InvalidInput, NotFound, PermissionDenied, Unauthenticated
from ficc.base.ids import parse_project_name
from ficc.base.json_types import JSONObject
from ficc.domain.accounts import ApiToken, TokenView, User, parse_lifetime_seconds
from ficc.domain.principals import ALL_PROJECTS, Principal
from ficc.domain.scopes import parse_scopes
from ficc.domain.token_limits import TokenRestrictions, narrowed, parse_restrictions
from ficc.services import audit
from ficc.services.accounts.credentials import digest, new_record_id, record_change
from ficc.services.accounts.owner import DEFAULT_PROJECT
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory

TOKEN_PREFIX = "ficc_"  # noqa: S105 - a prefix, not a secret


@dataclass(frozen=True)
class IssuedToken:
    id: str
    token: str
    scopes: frozenset[str]
    projects: frozenset[str]
    expires_at: datetime | None
    restrictions: TokenRestrictions | None = None


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
    restrictions: TokenRestrictions | None = None,
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
        id=new_record_id("token"),
        user_id=user.id,
        secret_hash=digest(secret),
        scopes=scopes,
        projects=projects,
        created_at=now,
        expires_at=expires_at,
        revoked_at=None,
        owner=owner,
        created_by=created_by,
    )
    await uow.tokens.add(token)
    details: JSONObject = {"scopes": sorted(scopes), "projects": sorted(projects)}
    if restrictions is not None and restrictions.any:
        await uow.token_limits.add(token.id, restrictions)
        details["restrictions"] = restrictions.to_json()
    await audit.record(
        uow,
        clock,
        action="token.created",
        actor=actor,
        project=None,
        target=token.id,
        details=details,
    )
    return IssuedToken(token.id, secret, scopes, projects, expires_at, restrictions)


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


class TokenLimitsView(Protocol):
    async def shown(self, token_ids: list[str]) -> Mapping[str, Mapping[str, object]]: ...


UNRESTRICTED: Final[Mapping[str, object]] = {
    **TokenRestrictions().to_json(),
    "used": None,
    "remaining": None,
}
"""What a token no rule restricts shows of restrictions (nothing is metered for it)."""


def _token_json(token: ApiToken, now: datetime) -> TokenView:
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


@dataclass(frozen=True, eq=False)
class Tokens:
    """API tokens: minted, listed, revoked and authenticated.

    ``cache``: the principals of tokens used lately, cleared by every revocation; None reads
    the database every time. ``limits``: what metering knows of restricted tokens, for the
    listing; None shows every token unrestricted.
    """

    uow_factory: UnitOfWorkFactory
    clock: Clock
    cache: CredentialCache | None = None
    limits: TokenLimitsView | None = None

    async def create_token(
        self,
        principal: Principal,
        *,
        scopes: object,
        projects: object,
        lifetime: object,
        restrictions: Mapping[str, object] | None = None,
    ) -> IssuedToken:
        """A token never holds more than its creator: scopes and projects are subsets, and it
        expires no later than the token that mints it (revoking that one revokes it too). A
        restricted creator's token is at most as broad as it (``token_limits.narrowed``)."""
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
            raise InvalidInput(
                "projects must be a non-empty list of project names", field="projects"
            )
        names = frozenset(
            parse_project_name(name, field=f"projects[{index}]")
            for index, name in enumerate(projects)
        )
        lifetime_seconds = parse_lifetime_seconds(lifetime)
        asked = parse_restrictions(restrictions or {})
        async with self.uow_factory() as uow:
            for name in sorted(names):
                if not await uow.projects.exists(name):
                    raise InvalidInput(
                        f"projects names an unknown project {name}", field="projects"
                    )
                principal.require_project(name)
            for index, peer_id in enumerate(sorted(asked.peers or ())):
                peer = await uow.peers.get(peer_id)
                if peer is None or peer.project not in names:
                    raise InvalidInput(
                        f"peers names {peer_id}, which is no peer of the token's projects",
                        field="peers",
                        details={"peer": peer_id, "index": index},
                    )
            creator = None
            if principal.token_id is not None:
                creator = await uow.token_limits.get(principal.token_id)
            granted = narrowed(
                asked, None if creator is None else creator.restrictions, principal.token_id
            )
            user = await uow.users.get(principal.user_id)
            if user is None:
                raise Unauthenticated("the credential's user no longer exists")
            not_after = await _creator_expiry(uow, self.clock, principal)
            issued = await mint_token(
                uow,
                self.clock,
                user=user,
                scopes=wanted_scopes,
                projects=names,
                lifetime_seconds=lifetime_seconds,
                actor=audit.actor_of(principal),
                created_by=principal.token_id,
                not_after=not_after,
                restrictions=granted,
            )
            await uow.commit()
        return issued

    async def revoke_token(self, principal: Principal, token_id: str) -> None:
        """Revoke a token whose projects are all among the caller's (the local owner: any),
        and in the same transaction every token it minted, and theirs, down the
        ``created_by`` chain.

        Any other token is answered as unknown, so a caller learns nothing of tokens beyond
        its projects; the owner token is beyond every credential but the owner's.
        """
        async with self.uow_factory() as uow:
            token = await uow.tokens.get(token_id)
            if token is None or not _may_revoke(principal, token):
                raise NotFound(f"no token {token_id} among the tokens this credential may revoke")
            now = self.clock()
            await uow.tokens.revoke(token_id, now)
            descendants = await uow.tokens.revoke_minted_by(token_id, now)
            await record_change(
                uow,
                self.clock,
                principal,
                "token.revoked",
                token_id,
                {"minted_tokens_revoked": list(descendants)},
            )
            await uow.commit()
        if self.cache is not None:
            self.cache.clear()

    async def list_tokens(self, principal: Principal) -> list[JSONObject]:
        """The tokens this credential may revoke (the local owner: all), never their secrets;
        each with its restrictions, ``used`` and ``remaining``."""
        now = self.clock()
        async with self.uow_factory() as uow:
            tokens = await uow.tokens.list()
        visible = [token for token in tokens if _may_revoke(principal, token)]
        shown = {} if self.limits is None else await self.limits.shown([t.id for t in visible])
        return [
            {**_token_json(token, now), **shown.get(token.id, UNRESTRICTED)} for token in visible
        ]

    async def visible_token(self, principal: Principal, token_id: str) -> ApiToken:
        """A token this credential may see (the tokens it may revoke, and itself), else 404."""
        async with self.uow_factory() as uow:
            token = await uow.tokens.get(token_id)
        if token is None or not (token.id == principal.token_id or _may_revoke(principal, token)):
            raise NotFound(
                f"no token {token_id} among the tokens this credential may see",
                details={"token": token_id},
            )
        return token

    async def authenticate_token(self, secret: str) -> Principal:
        if not secret.startswith(TOKEN_PREFIX):
            raise Unauthenticated("the bearer token is not a FICC token")
        secret_hash = digest(secret)
        cache = self.cache
        if cache is not None and (cached := cache.get(secret_hash, self.clock())) is not None:
            return cached
        async with self.uow_factory() as uow:
            token = await uow.tokens.by_secret_hash(secret_hash)
            if token is None or not token.usable_at(self.clock()):
                raise Unauthenticated("the bearer token is unknown, expired or revoked")
            user = await uow.users.get(token.user_id)
            limit = await uow.token_limits.get(token.id)
        if user is None:
            raise Unauthenticated("the bearer token is unknown, expired or revoked")
        principal = Principal(
            user_id=user.id,
            username=user.username,
            scopes=token.scopes & user.scopes,
            projects=token.projects,
            # Only the token `ficc init` wrote is the local owner, never a token minted later.
            is_owner=user.is_owner and token.owner,
            via="token",
            token_id=token.id,
            restrictions=None if limit is None else limit.restrictions,
        )
        if cache is not None:
            cache.put(secret_hash, principal, token.expires_at)
        return principal
