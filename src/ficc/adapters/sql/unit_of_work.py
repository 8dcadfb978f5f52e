"""The SQL unit of work: one connection, one transaction, rolled back unless committed."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

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


@dataclass(eq=False)
class SqlUnitOfWork:
    """Implements ``ficc.services.ports.UnitOfWork`` on an async SQLAlchemy engine."""

    database: Database
    lock: WriterLock
    guard: p.CommitGuard | None = None
    audit_signer: Signer | None = None
    _connection: SqlConnection | None = field(default=None, init=False)

    async def __aenter__(self) -> Self:
        await self.lock.__aenter__()
        try:
            connection = await self.database.connect()
        except BaseException:
            await self.lock.__aexit__()
            raise
        self._connection = connection
        self.users: p.UsersRepository = SqlUsers(connection)
        self.tokens: p.TokensRepository = SqlTokens(connection)
        self.sessions: p.SessionsRepository = SqlSessions(connection)
        self.login_links: p.LoginLinksRepository = SqlLoginLinks(connection)
        self.projects: p.ProjectsRepository = SqlProjects(connection)
        self.audit: p.AuditRepository = SqlChainedAudit(
            connection, postgres=not self.database.is_sqlite, signer=self.audit_signer
        )
        self.settings: p.SettingsRepository = SqlSettings(connection)
        self.nodes: p.NodesRepository = SqlNodes(connection)
        self.models: p.ModelsRepository = SqlModels(connection)
        self.model_usage: p.ModelUsage = SqlModelUsage(connection)
        self.services: p.ServicesRepository = SqlServices(connection)
        self.attempts: p.AttemptsRepository = SqlAttempts(connection)
        self.receipts: p.ReceiptsRepository = SqlReceipts(connection)
        self.peers: p.PeersRepository = SqlPeers(connection)
        self.offers: p.OffersRepository = SqlOffers(connection)
        self.grants: p.GrantsRepository = SqlGrants(connection)
        self.remote_grants: p.RemoteGrantsRepository = SqlRemoteGrants(connection)
        self.transfers: p.TransfersRepository = SqlTransfers(connection)
        self.leases: p.LeasesRepository = SqlLeases(connection)
        self.routes: p.RoutesRepository = SqlRoutes(connection)
        self.usage: p.UsageRepository = SqlUsage(connection)
        self.token_limits: p.TokenLimitsRepository = SqlTokenLimits(connection)
        self.usage_receipts: p.UsageReceiptsRepository = SqlUsageReceipts(connection)
        self.receipt_chains: p.ReceiptChainsRepository = SqlReceiptChains(connection)
        return self

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
