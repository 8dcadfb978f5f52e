"""The unit of work: one transaction holding every repository, and the guard its commit checks."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self

from ficc.services.ports import metering as m
from ficc.services.ports import repositories as r
from ficc.services.ports.receipt_chains import ReceiptChainsRepository


class CommitGuard(Protocol):
    """Checked by a unit of work inside its transaction, just before it commits: an effect
    of a process that no longer holds the active lease never lands."""

    async def check(self, leases: r.LeasesRepository) -> None: ...


class UnitOfWork(Protocol):
    """One transaction: everything done through it commits together or not at all."""

    users: r.UsersRepository
    tokens: r.TokensRepository
    sessions: r.SessionsRepository
    login_links: r.LoginLinksRepository
    projects: r.ProjectsRepository
    audit: r.AuditRepository
    settings: r.SettingsRepository
    nodes: r.NodesRepository
    models: r.ModelsRepository
    model_usage: r.ModelUsage
    services: r.ServicesRepository
    attempts: r.AttemptsRepository
    receipts: r.ReceiptsRepository
    peers: r.PeersRepository
    offers: r.OffersRepository
    grants: r.GrantsRepository
    remote_grants: r.RemoteGrantsRepository
    transfers: r.TransfersRepository
    leases: r.LeasesRepository
    routes: r.RoutesRepository
    usage: m.UsageRepository
    token_limits: m.TokenLimitsRepository
    usage_receipts: m.UsageReceiptsRepository
    receipt_chains: ReceiptChainsRepository

    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    async def commit(self) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]
