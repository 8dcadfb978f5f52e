"""The local owner: the account ``ficc init`` makes, its token, the control socket's principal."""

from __future__ import annotations

from dataclasses import dataclass

from ficc.base.errors import Unauthenticated
from ficc.domain.accounts import OWNER_USERNAME, User
from ficc.domain.principals import ALL_PROJECTS, Principal, owner_principal
from ficc.domain.scopes import LOCAL_SCOPES
from ficc.services import audit
from ficc.services.accounts.credentials import digest, new_record_id
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory

DEFAULT_PROJECT = "default"


async def ensure_owner(uow: UnitOfWork, clock: Clock) -> tuple[User, bool]:
    """The owner account and the default project exist after this; True if just made."""
    if not await uow.projects.exists(DEFAULT_PROJECT):
        await uow.projects.add(DEFAULT_PROJECT, clock())
    owner = await uow.users.owner()
    if owner is not None:
        return owner, False
    owner = User(
        id=new_record_id("user"),
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


async def adopt_owner_token(uow: UnitOfWork, secret: str) -> bool:
    """Mark the token written to ``owner.token`` as the owner token (databases made before
    tokens carried the mark); True if it was just marked."""
    return await uow.tokens.mark_owner(digest(secret))


@dataclass(frozen=True, eq=False)
class Owner:
    """The local owner as the control socket presents it."""

    uow_factory: UnitOfWorkFactory

    async def local_owner(self) -> Principal:
        """The principal of the control socket: the owner, with every scope."""
        async with self.uow_factory() as uow:
            owner = await uow.users.owner()
        if owner is None:
            raise Unauthenticated("this cluster has no owner; run `ficc init`")
        return owner_principal(owner.id, owner.username, via="socket")
