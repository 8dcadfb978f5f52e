"""Records the contract tests store: fresh IDs, and times with microseconds (as a clock
gives them)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy.exc
from tests.support.fakes.unit_of_work import IntegrityError

from ficc.base.ids import new_id
from ficc.domain.accounts import User
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.grants import Grant, GrantState, parse_grant
from ficc.domain.offers import Offer, OfferDirection, OfferState
from ficc.domain.peers import Peer, PeerRole, PeerState
from ficc.services.ports import UnitOfWork, UnitOfWorkFactory

DUPLICATE = (IntegrityError, sqlalchemy.exc.IntegrityError)
"""What each back end raises for a unique key taken twice."""

NOW = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def fresh(kind: str) -> str:
    return new_id(kind, secrets.token_bytes(16))


def digest() -> str:
    return secrets.token_hex(32)


async def committed(
    uow_factory: UnitOfWorkFactory, change: Callable[[UnitOfWork], Awaitable[None]]
) -> None:
    """Make ``change`` in a transaction of its own and commit it."""
    async with uow_factory() as uow:
        await change(uow)
        await uow.commit()


async def project(uow: UnitOfWork, name: str = "default") -> str:
    if not await uow.projects.exists(name):
        await uow.projects.add(name, NOW)
    return name


def user(*, owner: bool = False, username: str | None = None) -> User:
    return User(
        id=fresh("user"),
        username=username or secrets.token_hex(6),
        password_hash=None,
        is_owner=owner,
        scopes=frozenset({"models:read"}),
        projects=frozenset({"default"}),
        created_at=NOW,
    )


def model(project_name: str, digests: list[str], *, by_grant: str | None = None) -> CatalogueModel:
    files = [{"path": f"f{i}.gguf", "size": 1, "sha256": d} for i, d in enumerate(digests)]
    return CatalogueModel(
        id=fresh("model"),
        project=project_name,
        name="m",
        format="gguf",
        manifest={"name": "m", "format": "gguf", "files": files, "metadata": {}},
        sha256=digest(),
        created_at=NOW,
        created_by_grant=by_grant,
    )


def peer(project_name: str = "default", *, hypernet_id: str | None = None, age: float = 0) -> Peer:
    return Peer(
        id=fresh("peer"),
        project=project_name,
        label="p",
        hypernet_id=hypernet_id or secrets.token_hex(32),
        cluster_key=secrets.token_hex(32),
        state=PeerState.PAIRED,
        generation=1,
        role=PeerRole.REQUESTER,
        offer_id=None,
        selected_grant=None,
        ticket=None,
        created_at=at(age),
        updated_at=at(age),
    )


def offer(
    *,
    age: float = 0,
    lifetime: float = 60,
    state: OfferState = OfferState.RECEIVED,
    direction: OfferDirection = OfferDirection.INCOMING,
    service: str = "a" * 64,
    source: str | None = None,
    project_name: str | None = None,
) -> Offer:
    return Offer(
        id=fresh("offer"),
        direction=direction,
        project=project_name,
        other_hypernet_id=service,
        peer_label=None,
        peer_cluster_key=None,
        scopes=frozenset({"inference:invoke"}),
        state=state,
        revision=1,
        receipt=None,
        ticket=None,
        created_at=at(age),
        expires_at=at(age + lifetime),
        source=source,
    )


def grant(peer_id: str, project_name: str = "default", *, age: float = 0, **terms: Any) -> Grant:
    return Grant(
        id=fresh("grant"),
        project=project_name,
        peer_id=peer_id,
        terms=parse_grant({"scopes": ["inference:invoke"], **terms}),
        state=GrantState.ACTIVE,
        created_at=at(age),
        expires_at=at(age + 3600),
        revoked_at=None,
        requests_used=0,
        transfer_bytes_used=0,
    )
