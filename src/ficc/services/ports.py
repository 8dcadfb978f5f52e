"""Ports: what the use cases need from storage and the machine, as typing.Protocols.

Adapters implement them; services never import an adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from ficc.domain.accounts import ApiToken, LoginLink, User, WebSession
from ficc.domain.audit import AuditEntry
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.nodes import Node

Clock = Callable[[], datetime]


class UsersRepository(Protocol):
    async def add(self, user: User) -> None: ...
    async def get(self, user_id: str) -> User | None: ...
    async def by_username(self, username: str) -> User | None: ...
    async def owner(self) -> User | None: ...
    async def set_password_hash(self, user_id: str, password_hash: str) -> None: ...


class TokensRepository(Protocol):
    async def add(self, token: ApiToken) -> None: ...
    async def get(self, token_id: str) -> ApiToken | None: ...
    async def by_secret_hash(self, secret_hash: str) -> ApiToken | None: ...
    async def revoke(self, token_id: str, at: datetime) -> None: ...


class SessionsRepository(Protocol):
    async def add(self, session: WebSession) -> None: ...
    async def by_secret_hash(self, secret_hash: str) -> WebSession | None: ...
    async def delete(self, session_id: str) -> None: ...


class LoginLinksRepository(Protocol):
    async def add(self, link: LoginLink) -> None: ...
    async def by_secret_hash(self, secret_hash: str) -> LoginLink | None: ...
    async def mark_used(self, link_id: str, at: datetime) -> bool:
        """Mark an unused link used; False if it was already used (single use)."""
        ...


class ProjectsRepository(Protocol):
    async def add(self, name: str, at: datetime) -> None: ...
    async def exists(self, name: str) -> bool: ...
    async def list(self) -> list[tuple[str, datetime]]: ...


class AuditRepository(Protocol):
    async def append(self, entry: AuditEntry) -> int: ...
    async def list(
        self, *, project: str | None, after_seq: int, limit: int
    ) -> list[AuditEntry]: ...


class SettingsRepository(Protocol):
    async def get(self, key: str) -> Any | None: ...
    async def put(self, key: str, value: Any) -> None: ...


class NodesRepository(Protocol):
    async def upsert(self, node: Node) -> None: ...
    async def get(self, node_id: str) -> Node | None: ...
    async def list(self) -> list[Node]: ...


class ModelsRepository(Protocol):
    async def add(self, model: CatalogueModel) -> None: ...
    async def get(self, model_id: str) -> CatalogueModel | None: ...
    async def list(self, project: str) -> list[CatalogueModel]: ...
    async def delete(self, model_id: str) -> None: ...
    async def blob_in_use(self, sha256: str) -> bool: ...


class ModelUsage(Protocol):
    """Who uses a model (inference services); a used model cannot be deleted."""

    async def users_of_model(self, model_id: str) -> Sequence[str]: ...


class UnitOfWork(Protocol):
    """One transaction: everything done through it commits together or not at all."""

    users: UsersRepository
    tokens: TokensRepository
    sessions: SessionsRepository
    login_links: LoginLinksRepository
    projects: ProjectsRepository
    audit: AuditRepository
    settings: SettingsRepository
    nodes: NodesRepository
    models: ModelsRepository
    model_usage: ModelUsage

    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    async def commit(self) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]


class BlobStore(Protocol):
    """Content-addressed file storage (blocking calls: run them off the event loop)."""

    def import_file(
        self, source: Path, expected_sha256: str | None = None, *, field: str = "source"
    ) -> tuple[str, int]: ...
    def has(self, sha256: str) -> bool: ...
    def blob_path(self, sha256: str) -> Path: ...
    def remove(self, sha256: str) -> bool: ...


class UserPathResolver(Protocol):
    """Checks a path a user named on this machine and returns the real file."""

    def __call__(self, path: str, *, field: str) -> Path: ...
