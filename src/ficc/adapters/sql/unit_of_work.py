"""The SQL unit of work: one connection, one transaction, rolled back unless committed."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Final, Self

from ficc.adapters.sql.accounts import SqlLoginLinks, SqlProjects, SqlSessions, SqlTokens, SqlUsers
from ficc.adapters.sql.audit import SqlChainedAudit
from ficc.adapters.sql.catalogue import SqlModels, SqlModelUsage
from ficc.adapters.sql.database import Database, SqlConnection, WriterLock
from ficc.adapters.sql.grants import SqlGrants
from ficc.adapters.sql.inference import SqlAttempts, SqlServices
from ficc.adapters.sql.leases import SqlLeases
from ficc.adapters.sql.mutation_receipts import SqlReceipts
from ficc.adapters.sql.nodes import SqlNodes
from ficc.adapters.sql.offers import SqlOffers
from ficc.adapters.sql.peers import SqlPeers, SqlRemoteGrants
from ficc.adapters.sql.receipt_chains import SqlReceiptChains
from ficc.adapters.sql.routes import SqlRoutes
from ficc.adapters.sql.settings import SqlSettings
from ficc.adapters.sql.token_limits import SqlTokenLimits
from ficc.adapters.sql.transfers import SqlTransfers
from ficc.adapters.sql.usage_receipts import SqlUsageReceipts
from ficc.adapters.sql.usage_records import SqlUsage
from ficc.protocol.signing import Signer
from ficc.services import ports as p

_REPOSITORIES: Final[dict[str, Callable[[SqlConnection], object]]] = {
    "users": SqlUsers,
    "tokens": SqlTokens,
    "sessions": SqlSessions,
    "login_links": SqlLoginLinks,
    "projects": SqlProjects,
    "settings": SqlSettings,
    "nodes": SqlNodes,
    "models": SqlModels,
    "model_usage": SqlModelUsage,
    "services": SqlServices,
    "attempts": SqlAttempts,
    "receipts": SqlReceipts,
    "peers": SqlPeers,
    "offers": SqlOffers,
    "grants": SqlGrants,
    "remote_grants": SqlRemoteGrants,
    "transfers": SqlTransfers,
    "leases": SqlLeases,
    "routes": SqlRoutes,
    "usage": SqlUsage,
    "token_limits": SqlTokenLimits,
    "usage_receipts": SqlUsageReceipts,
    "receipt_chains": SqlReceiptChains,
}
"""Each repository by its name on the unit of work, made from the transaction's connection."""


class SqlUnitOfWork:
    """Implements ``ficc.services.ports.UnitOfWork`` on an async SQLAlchemy engine.

    A repository is made the first time the transaction uses it: a request's transaction
    touches two or three of the twenty-four.
    """

    users: p.UsersRepository
    tokens: p.TokensRepository
    sessions: p.SessionsRepository
    login_links: p.LoginLinksRepository
    projects: p.ProjectsRepository
    audit: p.AuditRepository
    settings: p.SettingsRepository
    nodes: p.NodesRepository
    models: p.ModelsRepository
    model_usage: p.ModelUsage
    services: p.ServicesRepository
    attempts: p.AttemptsRepository
    receipts: p.ReceiptsRepository
    peers: p.PeersRepository
    offers: p.OffersRepository
    grants: p.GrantsRepository
    remote_grants: p.RemoteGrantsRepository
    transfers: p.TransfersRepository
    leases: p.LeasesRepository
    routes: p.RoutesRepository
    usage: p.UsageRepository
    token_limits: p.TokenLimitsRepository
    usage_receipts: p.UsageReceiptsRepository
    receipt_chains: p.ReceiptChainsRepository

    def __init__(
        self,
        database: Database,
        lock: WriterLock,
        guard: p.CommitGuard | None = None,
        audit_signer: Signer | None = None,
    ) -> None:
        self.database = database
        self.lock = lock
        self.guard = guard
        self.audit_signer = audit_signer
        self._connection: SqlConnection | None = None
        self._made: list[str] = []

    async def __aenter__(self) -> Self:
        await self.lock.__aenter__()
        try:
            self._connection = await self.database.connect()
        except BaseException:
            await self.lock.__aexit__()
            raise
        return self

    def __getattr__(self, name: str) -> object:
        """The repository ``name``, made on first use from this transaction's connection."""
        if name == "audit":
            repository: object = SqlChainedAudit(
                self.connection, postgres=not self.database.is_sqlite, signer=self.audit_signer
            )
        else:
            make = _REPOSITORIES.get(name)
            if make is None:
                raise AttributeError(name)
            repository = make(self.connection)
        setattr(self, name, repository)
        self._made.append(name)
        return repository

    @property
    def connection(self) -> SqlConnection:
        if self._connection is None:
            raise RuntimeError("the unit of work is not open")
        return self._connection

    async def commit(self) -> None:
        """Commit; with a guard, only once it has found this process still the active one
        (in this transaction: a fenced process's effect is rolled back, never committed)."""
        if self.guard is not None:
            await self.guard.check(self.leases)
        await self.connection.commit()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        connection, self._connection = self._connection, None
        for name in self._made:
            delattr(self, name)  # made on that connection: the next transaction makes its own
        self._made.clear()
        try:
            if connection is not None:
                if connection.in_transaction():
                    await connection.rollback()
                await connection.close()
        finally:
            await self.lock.__aexit__()


class SqlUnitOfWorkFactory:
    """Makes units of work sharing one engine and, on SQLite, one writer lock.

    ``guard``: set where processes share the database (PostgreSQL), checked at every commit.
    ``audit_signer`` (the cluster key): they sign the audit log's heads and tombstones.
    """

    def __init__(
        self,
        database: Database,
        guard: p.CommitGuard | None = None,
        *,
        audit_signer: Signer | None = None,
        lock: WriterLock | None = None,
    ) -> None:
        self.database = database
        self._lock = lock or WriterLock(database)
        self.guard = guard
        self._audit_signer = audit_signer

    def __call__(self) -> SqlUnitOfWork:
        return SqlUnitOfWork(self.database, self._lock, self.guard, self._audit_signer)

    def signed_by(self, signer: Signer) -> SqlUnitOfWorkFactory:
        """The same database, writer lock and guard, signing the audit log with ``signer``."""
        return SqlUnitOfWorkFactory(self.database, self.guard, audit_signer=signer, lock=self._lock)

    def unguarded(self) -> SqlUnitOfWorkFactory:
        """Units of work over the same engine and writer lock, with no guard: the lease's own."""
        return SqlUnitOfWorkFactory(self.database, audit_signer=self._audit_signer, lock=self._lock)
