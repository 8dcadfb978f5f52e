"""The unit of work: one transaction holding every repository, and the guard its commit checks."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self

from ficc.services.ports.repositories import (
    AttemptsRepository,
    AuditRepository,
    GrantsRepository,
    LeasesRepository,
    LoginLinksRepository,
    ModelsRepository,
    ModelUsage,
    NodesRepository,
    OffersRepository,
    PeersRepository,
    ProjectsRepository,
    ReceiptsRepository,
    RemoteGrantsRepository,
    RoutesRepository,
    ServicesRepository,
    SessionsRepository,
    SettingsRepository,
    TokenLimitsRepository,
    TokensRepository,
    TransfersRepository,
    UsageReceiptsRepository,
    UsageRepository,
    UsersRepository,
)


class CommitGuard(Protocol):
    """Checked by a unit of work inside its transaction, just before it commits: an effect
    of a process that no longer holds the active lease never lands."""

    async def check(self, leases: LeasesRepository) -> None: ...


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
    services: ServicesRepository
    attempts: AttemptsRepository
    receipts: ReceiptsRepository
    peers: PeersRepository
    offers: OffersRepository
    grants: GrantsRepository
    remote_grants: RemoteGrantsRepository
    transfers: TransfersRepository
    leases: LeasesRepository
    routes: RoutesRepository
    usage: UsageRepository
    token_limits: TokenLimitsRepository
    usage_receipts: UsageReceiptsRepository

    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    async def commit(self) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]
