"""Ports: what the use cases need from storage and the machine, as typing.Protocols.

Adapters implement them; services never import an adapter. Services import every port from
here; the modules say where each kind lives: ``repositories``, ``metering`` and
``unit_of_work`` (storage), ``engines``, ``blobs`` and ``clock``; ``remote``, the one a service
implements: the requester's side of a peer request as routes use it.
"""

from __future__ import annotations

from ficc.services.ports.blobs import (
    BlobStore,
    Hasher,
    PartialWriter,
    UserPathResolver,
)
from ficc.services.ports.clock import Clock
from ficc.services.ports.engines import (
    EngineAddress,
    EngineConnector,
    EngineEvent,
    EngineStream,
)
from ficc.services.ports.metering import (
    BudgetRows,
    TokenLimitsRepository,
    UsageReceiptsRepository,
    UsageRepository,
)
from ficc.services.ports.receipt_chains import ReceiptChainsRepository
from ficc.services.ports.remote import PeerAsk, RemoteInvoker, RoutedAsk
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
    TokensRepository,
    TransfersRepository,
    UsersRepository,
)
from ficc.services.ports.unit_of_work import (
    CommitGuard,
    UnitOfWork,
    UnitOfWorkFactory,
)

__all__ = [
    "AttemptsRepository",
    "AuditRepository",
    "BlobStore",
    "BudgetRows",
    "Clock",
    "CommitGuard",
    "EngineAddress",
    "EngineConnector",
    "EngineEvent",
    "EngineStream",
    "GrantsRepository",
    "Hasher",
    "LeasesRepository",
    "LoginLinksRepository",
    "ModelUsage",
    "ModelsRepository",
    "NodesRepository",
    "OffersRepository",
    "PartialWriter",
    "PeerAsk",
    "PeersRepository",
    "ProjectsRepository",
    "ReceiptChainsRepository",
    "ReceiptsRepository",
    "RemoteGrantsRepository",
    "RemoteInvoker",
    "RoutedAsk",
    "RoutesRepository",
    "ServicesRepository",
    "SessionsRepository",
    "SettingsRepository",
    "TokenLimitsRepository",
    "TokensRepository",
    "TransfersRepository",
    "UnitOfWork",
    "UnitOfWorkFactory",
    "UsageReceiptsRepository",
    "UsageRepository",
    "UserPathResolver",
    "UsersRepository",
]
