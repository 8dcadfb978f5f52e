"""Ports: what the use cases need from storage, the peers, the engines and the machine, as
typing.Protocols.

Adapters implement them; services never import an adapter. The modules say where each kind
lives: ``repositories``, ``metering`` and ``unit_of_work`` (storage), ``engines``, ``blobs``,
``clock`` and ``passwords`` (the machine); ``remote``, the one a service implements: the
requester's side of a peer request as routes use it. Services import these from here;
``peers`` (the channel to other clusters) and ``runtimes`` (engines' processes and logs) carry
many values besides their ports, and are imported from their modules.
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
from ficc.services.ports.passwords import PasswordHasher
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
    "PasswordHasher",
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
