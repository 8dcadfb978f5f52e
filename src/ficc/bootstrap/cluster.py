"""The wiring of one cluster: adapters in, the services over them out, as a plain record.

:func:`build` is the whole graph in one function. Every adapter a test may want to replace
(storage, the transport, runtimes, engines, the clock) comes in as an argument; left out, the
real one is made from the settings.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ficc.adapters import metrics
from ficc.adapters.blobstore import BlobStore, resolve_user_path
from ficc.adapters.engine_logs import EngineLogFiles
from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.hypernet import HyperNetEndpoint
from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.adapters.passwords import Argon2Hasher
from ficc.adapters.runtimes import build_runtimes
from ficc.adapters.runtimes.attempt_fence import fence_attempt
from ficc.adapters.runtimes.sandbox import EngineSandbox
from ficc.adapters.sql.database import Database
from ficc.adapters.state_dir import StateDir
from ficc.bootstrap.ray import RayPlacement
from ficc.bootstrap.settings import Settings, system_clock
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.inference import RuntimeName, UpstreamAllowList
from ficc.services.accounts import Accounts
from ficc.services.audit import Audit
from ficc.services.catalogue import Catalogue
from ficc.services.companion import Companion, CompanionChannel
from ficc.services.federation.approval import Approval
from ficc.services.federation.common import ClusterSigner, FederationContext
from ficc.services.federation.grants import Grants
from ficc.services.federation.known_peers import KnownPeers
from ficc.services.federation.overview import Overview
from ficc.services.federation.pairing import Pairing
from ficc.services.federation.peers import Peers
from ficc.services.federation.remote_grants import RemoteGrantCopies
from ficc.services.federation.usage import GrantUsage
from ficc.services.federation.usage_receipts import UsageReceipts
from ficc.services.grant_slots import GrantSlots
from ficc.services.inference import InferenceServices, Supervision
from ficc.services.inference.logs import ServiceLogs
from ficc.services.inference.routes import Routes
from ficc.services.lease import ACTIVE, STANDBY, LeaseKeeper, Role
from ficc.services.metering import Meter
from ficc.services.nodes import Nodes
from ficc.services.ports import Clock, EngineConnector, UnitOfWorkFactory
from ficc.services.ports.peers import Transport, TransportFactory
from ficc.services.ports.runtimes import Runtime
from ficc.services.projects import Projects
from ficc.services.remote.client import RemoteClient
from ficc.services.remote.gate import Gate
from ficc.services.remote.inference_ops import InferenceOperations
from ficc.services.remote.model_ops import ModelOperations
from ficc.services.remote.table import Handlers, PeerOperations
from ficc.services.remote.usage_meter import RequesterUsage
from ficc.services.token_limits import TokenLimits
from ficc.services.transfers import Fetcher, RangeServer, Transfers

LABEL_SETTING = "label"


@dataclass(frozen=True)
class Federation:
    """The federation's services, as the routers reach them."""

    known: KnownPeers
    slots: GrantSlots
    pairing: Pairing
    approval: Approval
    grants: Grants
    peers: Peers
    overview: Overview
    operations: PeerOperations
    usage: GrantUsage
    receipts: UsageReceipts


@dataclass
class Cluster:
    """The wired parts of one running FICC cluster: a record, with no behaviour of its own."""

    settings: Settings
    database: Database | None
    """The SQL database behind ``uow_factory``; None when storage is injected (the fake tier)."""
    uow_factory: UnitOfWorkFactory
    cluster_key: ClusterKey
    clock: Clock
    blobs: BlobStore
    accounts: Accounts
    projects: Projects
    catalogue: Catalogue
    nodes: Nodes
    audit: Audit
    inference: InferenceServices
    service_logs: ServiceLogs
    """Engines' logs for the operator (never a peer): ``run/SERVICE/ATTEMPT.log``."""
    companion: Companion
    federation: Federation
    remote: RemoteClient
    routes: Routes
    tokens: TokenLimits
    """Restricted local tokens: admission, settlement, usage and what remains."""
    transfers: Transfers
    ray: RayPlacement | None
    model_file: Callable[[CatalogueModel], Path]
    """The file an engine loads for a model of the catalogue."""
    label: str = ""
    public_url: str | None = None
    node_refresher: asyncio.Task[None] | None = None
    """Keeps the nodes current while the cluster runs (``lifecycle.start`` starts it)."""
    purger: asyncio.Task[None] | None = None
    """Purges expired sessions, login links and offers daily (``lifecycle.start`` starts it)."""
    lease: LeaseKeeper | None = None
    """The active lease, where processes share the database (PostgreSQL); None: always active."""
    lease_renewer: asyncio.Task[None] | None = None
    """Renews the lease while this process is the active one (``lifecycle.start`` starts it)."""
    serving: bool = False
    """``lifecycle.start`` has brought the cluster up: with a lease, only then is it active."""

    @property
    def state(self) -> StateDir:
        return self.settings.state

    @property
    def role(self) -> Role:
        """``active`` (serves everything) or ``standby`` (serves health only): with a lease,
        active while it holds the lease and has started; without one, always active."""
        if self.lease is None:
            return ACTIVE
        return ACTIVE if self.serving and self.lease.active() else STANDBY


CompanionTransports = Callable[[Federation], TransportFactory]
"""Given the federation a transport serves, the factory the companion makes transports with."""


def build(
    settings: Settings,
    *,
    uow_factory: UnitOfWorkFactory,
    cluster_key: ClusterKey,
    database: Database | None = None,
    label: str = "",
    clock: Clock = system_clock,
    transport_factory: CompanionTransports | None = None,
    runtimes: Mapping[RuntimeName, Runtime] | None = None,
    engines: EngineConnector | None = None,
    fence: Callable[[str, float], Awaitable[int]] | None = None,
    free_disk: Callable[[], int] | None = None,
) -> Cluster:
    """Wire one cluster. Left out, the transport is HyperNet, runtimes and engines the real
    ones (engine processes confined by the sandbox), the attempt fence the real one, and free
    disk that of the state directory's store."""
    state = settings.state
    blobs = BlobStore(state.store)
    upstream_allow = UpstreamAllowList.parse(settings.upstream_allow)
    engine_clients: EngineClients | None = None
    connector: EngineConnector
    if engines is None:
        connector = engine_clients = EngineClients()
    else:
        connector = engines
    wired_runtimes: dict[RuntimeName, Runtime] = (
        dict(runtimes)
        if runtimes is not None
        else build_runtimes(
            log_dir=state.runtime,
            engines=engine_clients,
            upstream_allow=upstream_allow,
            sandbox=EngineSandbox.from_environment(hide=[state.root]),
        )
    )
    attempt_fence: Callable[[str, float], Awaitable[int]] = fence or fence_attempt
    ray: RayPlacement | None = None
    if settings.ray_address is not None:
        if engine_clients is None:
            raise ValueError("Ray placement needs the real engine clients")
        ray = RayPlacement.wrap(
            settings.ray_address,
            cluster_key.public_text,
            wired_runtimes,
            engine_clients,
            state.store,
        )
        attempt_fence = ray.fence_attempt

    def model_file(model: CatalogueModel) -> Path:
        """The file an engine loads for ``model``: its GGUF file (or its first file)."""
        files = model.manifest["files"]
        entry = next((f for f in files if str(f["path"]).endswith(".gguf")), files[0])
        digest = str(entry["sha256"])
        if blobs.has(digest):
            return blobs.blob_path(digest)
        return state.store / "missing" / digest

    inference = InferenceServices(
        uow_factory,
        clock,
        wired_runtimes,
        model_file,
        attempt_fence,
        connector,
        Supervision(secrets.token_hex(8), on_restart=metrics.count_restart),
        upstream_allow=upstream_allow,
        stream_join_seconds=settings.stream_join_ms / 1000,
    )
    federation: Federation | None = None

    def transport(agent_directory: Path, bind_address: str) -> Transport:
        """Made when the companion starts, by then over the federation wired below."""
        if federation is None:
            raise RuntimeError("the transport is made before the federation is wired")
        make = (transport_factory or _hypernet(settings, cluster_key))(federation)
        return make(agent_directory, bind_address)

    companion = Companion(
        uow_factory, clock, transport, cluster_key.public_text, settings.hypernet_bind
    )
    link = CompanionChannel(companion)
    signer = ClusterSigner(cluster_key.public_key, cluster_key.sign)
    known = KnownPeers(uow_factory)
    context = FederationContext(uow_factory, clock, link, known)
    slots = GrantSlots()
    catalogue = Catalogue(uow_factory, clock, blobs, owner_path)
    meter = Meter(uow_factory, clock, sign=cluster_key.sign)
    meter.on_settled = metrics.count_federation_tokens
    copies = RemoteGrantCopies(context)
    grants = Grants(
        context, slots, copies, on_grant_ended=inference.upkeep.stop_for_grant, meter=meter
    )
    pairing = Pairing(context, signer, verify_signature)
    approval = Approval(context, grants, signer)
    peers = Peers(context, grants)
    tokens = TokenLimits(uow_factory, meter, clock)
    receipts = UsageReceipts(context, verify_signature)
    remote = RemoteClient(
        uow_factory, link, copies, RequesterUsage(uow_factory, clock, tokens, receipts)
    )
    remote.on_settled = metrics.count_federation_tokens
    routes = Routes(
        uow_factory,
        clock,
        inference.router,
        inference.invocations,
        remote,
        count=metrics.count_route_outcome,
        tokens=tokens,
    )
    transfers = Transfers(
        Fetcher(
            uow_factory,
            clock,
            remote,
            blobs,
            free_disk or (lambda: shutil.disk_usage(state.store).free),
            range_bytes=settings.transfers.range_bytes,
            stall_seconds=settings.transfers.stall_seconds,
        )
    )
    operations = PeerOperations(
        uow_factory,
        clock,
        Gate(uow_factory, clock, known, slots, meter),
        Handlers(
            pairing=pairing,
            approval=approval,
            peers=peers,
            grants=grants,
            inference=InferenceOperations(uow_factory, inference, meter),
            models=ModelOperations(uow_factory, clock, catalogue, slots),
            transfers=RangeServer(uow_factory, blobs),
            receipts=receipts,
        ),
    )
    federation = Federation(
        known=known,
        slots=slots,
        pairing=pairing,
        approval=approval,
        grants=grants,
        peers=peers,
        overview=Overview(uow_factory, clock, companion, grants, copies, transfers.list),
        operations=operations,
        usage=GrantUsage(uow_factory),
        receipts=receipts,
    )
    return Cluster(
        settings=settings,
        database=database,
        uow_factory=uow_factory,
        cluster_key=cluster_key,
        clock=clock,
        blobs=blobs,
        accounts=Accounts.wire(uow_factory, clock, Argon2Hasher(), limits=tokens),
        projects=Projects(uow_factory, clock),
        catalogue=catalogue,
        nodes=Nodes(uow_factory, clock),
        audit=Audit(uow_factory, cluster_key.public_key, verify_signature),
        inference=inference,
        service_logs=ServiceLogs(uow_factory, EngineLogFiles(state.runtime)),
        companion=companion,
        federation=federation,
        remote=remote,
        routes=routes,
        tokens=tokens,
        transfers=transfers,
        ray=ray,
        model_file=model_file,
        label=label,
    )


def owner_path(path: str, *, field: str) -> Path:
    """The local owner may import any regular file this process can read."""
    return resolve_user_path(path, None, field=field)


def _hypernet(settings: Settings, cluster_key: ClusterKey) -> CompanionTransports:
    """HyperNet endpoints that serve ``federation``'s operations to the peers it knows."""

    def factory(federation: Federation) -> TransportFactory:
        def make(agent_directory: Path, bind_address: str) -> Transport:
            return HyperNetEndpoint(
                agent_directory=agent_directory,
                cluster_key=cluster_key,
                lookup=federation.known.lookup,
                handler=federation.operations.serve,
                bind_address=bind_address,
                relay=settings.hypernet_relay,
                connect_timeout_seconds=settings.hypernet_connect_seconds,
                limits=settings.hypernet,
                body_bound=federation.known.body_bound,
            )

        return make

    return factory
