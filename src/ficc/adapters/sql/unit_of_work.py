"""The SQL unit of work: one connection, one transaction, rolled back unless committed."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from ficc.adapters.sql.database import Database, SqlConnection, WriterLock
from ficc.adapters.sql.repositories import (
    SqlAttempts,
    SqlAudit,
    SqlGrants,
    SqlLoginLinks,
    SqlModels,
    SqlModelUsage,
    SqlNodes,
    SqlOffers,
    SqlPeers,
    SqlProjects,
    SqlReceipts,
    SqlRemoteGrants,
    SqlServices,
    SqlSessions,
    SqlSettings,
    SqlTokens,
    SqlTransfers,
    SqlUsers,
)
from ficc.adapters.sql.usage_records import SqlUsage
from ficc.services.ports import (
    AttemptsRepository,
    AuditRepository,
    GrantsRepository,
    LoginLinksRepository,
    ModelsRepository,
    ModelUsage,
    NodesRepository,
    OffersRepository,
    PeersRepository,
    ProjectsRepository,
    ReceiptsRepository,
    RemoteGrantsRepository,
    ServicesRepository,
    SessionsRepository,
    SettingsRepository,
    TokensRepository,
    TransfersRepository,
    UsageRepository,
    UsersRepository,
)


class SqlUnitOfWork:
    """Implements ``ficc.services.ports.UnitOfWork`` on an async SQLAlchemy engine."""

    def __init__(self, database: Database, lock: WriterLock) -> None:
        self._database = database
        self._lock = lock
        self._connection: SqlConnection | None = None

    async def __aenter__(self) -> Self:
        await self._lock.__aenter__()
        try:
            connection = await self._database.connect()
        except BaseException:
            await self._lock.__aexit__()
            raise
        self._connection = connection
        self.users: UsersRepository = SqlUsers(connection)
        self.tokens: TokensRepository = SqlTokens(connection)
        self.sessions: SessionsRepository = SqlSessions(connection)
        self.login_links: LoginLinksRepository = SqlLoginLinks(connection)
        self.projects: ProjectsRepository = SqlProjects(connection)
        self.audit: AuditRepository = SqlAudit(connection)
        self.settings: SettingsRepository = SqlSettings(connection)
        self.nodes: NodesRepository = SqlNodes(connection)
        self.models: ModelsRepository = SqlModels(connection)
        self.model_usage: ModelUsage = SqlModelUsage(connection)
        self.services: ServicesRepository = SqlServices(connection)
        self.attempts: AttemptsRepository = SqlAttempts(connection)
        self.receipts: ReceiptsRepository = SqlReceipts(connection)
        self.peers: PeersRepository = SqlPeers(connection)
        self.offers: OffersRepository = SqlOffers(connection)
        self.grants: GrantsRepository = SqlGrants(connection)
        self.remote_grants: RemoteGrantsRepository = SqlRemoteGrants(connection)
        self.transfers: TransfersRepository = SqlTransfers(connection)
        self.usage: UsageRepository = SqlUsage(connection)
        return self

    @property
    def connection(self) -> SqlConnection:
        if self._connection is None:
            raise RuntimeError("the unit of work is not open")
        return self._connection

    async def commit(self) -> None:
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
            await self._lock.__aexit__()


class SqlUnitOfWorkFactory:
    """Makes units of work sharing one engine and, on SQLite, one writer lock."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._lock = WriterLock(database)

    def __call__(self) -> SqlUnitOfWork:
        return SqlUnitOfWork(self.database, self._lock)
