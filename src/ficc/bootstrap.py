"""The composition root: settings in, a wired cluster out. Only entrypoints import it."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ficc.adapters.blobstore import BlobStore, resolve_user_path
from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.hypernet import HyperNetEndpoint, SessionLimits, limits_from_environment
from ficc.adapters.hypernet.endpoint import DEFAULT_CONNECT_TIMEOUT_SECONDS
from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.adapters.node_probe import probe_node
from ficc.adapters.passwords import Argon2Hasher
from ficc.adapters.runtimes import build_runtimes
from ficc.adapters.runtimes.attempt_fence import fence_attempt
from ficc.adapters.runtimes.sandbox import EngineSandbox
from ficc.adapters.sql.database import Database, default_url
from ficc.adapters.sql.schema import upgrade as upgrade_schema
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.adapters.state_dir import StateDir
from ficc.base.defaults import DEFAULT_HYPERNET_BIND, DEFAULT_LISTEN
from ficc.base.errors import InvalidInput
from ficc.base.ids import new_id
from ficc.base.units import seconds_setting
from ficc.domain import transfers as tr
from ficc.domain.accounts import LoginThrottle
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.inference import RuntimeName, UpstreamAllowList
from ficc.domain.nodes import Gpu
from ficc.domain.principals import ALL_PROJECTS
from ficc.domain.scopes import LOCAL_SCOPES
from ficc.services import accounts, nodes
from ficc.services.companion import Companion, CompanionChannel, Transport
from ficc.services.federation.approval import Approval
from ficc.services.federation.common import ClusterSigner, FederationContext
from ficc.services.federation.grants import Grants
from ficc.services.federation.known_peers import KnownPeers
from ficc.services.federation.overview import Overview
from ficc.services.federation.pairing import Pairing
from ficc.services.federation.peers import Peers
from ficc.services.federation.remote_grants import RemoteGrantCopies
from ficc.services.grant_slots import GrantSlots
from ficc.services.inference import InferenceServices
from ficc.services.nodes import Capacity
from ficc.services.ports import Clock
from ficc.services.remote.client import RemoteClient
from ficc.services.remote.gate import Gate
from ficc.services.remote.inference_ops import InferenceOperations
from ficc.services.remote.model_ops import ModelOperations
from ficc.services.remote.table import Handlers, PeerOperations
from ficc.services.runtimes import Runtime
from ficc.services.transfers import Transfers

if TYPE_CHECKING:
    from ficc.adapters.ray_nodes import RayNodes
    from ficc.adapters.runtimes.ray import RayRuntime

NODE_REFRESH_SECONDS = 10.0
LABEL_SETTING = "label"
RANGE_BYTES_VARIABLE = "FICC_TRANSFER_RANGE_BYTES"
"""Bytes asked for in one ``models.range`` (default 64 MiB, at most 256 MiB). Tests and
benchmarks set it to keep model files small; an interruption re-fetches at most this much."""
STALL_SECONDS_VARIABLE = "FICC_TRANSFER_STALL_SECONDS"
"""Seconds without a byte before a range is abandoned and its transfer paused (default 30)."""
CONNECT_SECONDS_VARIABLE = "FICC_HYPERNET_CONNECT_SECONDS"
"""Seconds a connection to a peer may take before the peer is unreachable (default 5, 0.1 to
3600). Tests set it to see a stopped peer reported without the full wait."""


def connect_seconds_from_environment(environ: Mapping[str, str] | None = None) -> float:
    """The peer connect deadline: :data:`CONNECT_SECONDS_VARIABLE`, unset or empty the default."""
    env = os.environ if environ is None else environ
    return seconds_setting(env, CONNECT_SECONDS_VARIABLE, DEFAULT_CONNECT_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class TransferTuning:
    """How acquisition splits files and when it gives up on a silent peer."""

    range_bytes: int = tr.RANGE_BYTES
    stall_seconds: float = tr.STALL_SECONDS

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> TransferTuning:
        """Read the two ``FICC_TRANSFER_*`` variables; an unset or empty one keeps its default."""
        env = os.environ if environ is None else environ
        range_bytes = tr.RANGE_BYTES
        raw_range = env.get(RANGE_BYTES_VARIABLE, "").strip()
        if raw_range:
            try:
                range_bytes = int(raw_range)
            except ValueError:
                range_bytes = 0
            if not 1 <= range_bytes <= tr.MAX_RANGE_BYTES:
                raise InvalidInput(
                    f"{RANGE_BYTES_VARIABLE} must be an integer from 1 to {tr.MAX_RANGE_BYTES}",
                    field=RANGE_BYTES_VARIABLE,
                )
        stall_seconds = seconds_setting(env, STALL_SECONDS_VARIABLE, tr.STALL_SECONDS)
        return cls(range_bytes=range_bytes, stall_seconds=stall_seconds)


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Settings:
    """Everything `ficc serve` and `ficc init` are configured with."""

    state_dir: Path
    database_url: str | None = None
    listen: str = DEFAULT_LISTEN
    hypernet_bind: str = DEFAULT_HYPERNET_BIND
    hypernet_relay: str = "disabled"
    upstream_allow: tuple[str, ...] = ()
    """URL prefixes ``openai`` services may reach (``--upstream-allow``); none by default."""
    transfers: TransferTuning = field(default_factory=TransferTuning.from_environment)
    hypernet: SessionLimits = field(default_factory=limits_from_environment)
    hypernet_connect_seconds: float = field(default_factory=connect_seconds_from_environment)
    ray_address: str | None = None
    """The Ray cluster whose nodes FICC schedules replicas on (``--ray``); None: this machine."""

    @property
    def state(self) -> StateDir:
        return StateDir(self.state_dir)

    @property
    def database(self) -> str:
        return self.database_url or default_url(self.state_dir)


@dataclass(frozen=True)
class InitResult:
    state_dir: Path
    created: bool
    label: str
    cluster_key: str


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


@dataclass
class Cluster:
    """The wired parts of one running FICC cluster."""

    settings: Settings
    database: Database
    uow_factory: SqlUnitOfWorkFactory
    cluster_key: ClusterKey
    clock: Clock = system_clock
    hasher: Argon2Hasher = field(default_factory=Argon2Hasher)
    label: str = ""
    public_url: str | None = None
    _node_refresher: asyncio.Task[None] | None = None
    credentials: accounts.CredentialCache = field(default_factory=accounts.CredentialCache)
    login_throttle: LoginThrottle = field(default_factory=LoginThrottle)
    known_projects: set[str] = field(default_factory=set)
    blobs: BlobStore = field(init=False)
    inference: InferenceServices = field(init=False)
    companion: Companion = field(init=False)
    federation: Federation = field(init=False)
    remote: RemoteClient = field(init=False)
    transfers: Transfers = field(init=False)
    ray: RayPlacement | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.blobs = BlobStore(self.state.store)
        engines = EngineClients()
        upstream_allow = UpstreamAllowList.parse(self.settings.upstream_allow)
        runtimes = build_runtimes(
            log_dir=self.state.runtime,
            engines=engines,
            upstream_allow=upstream_allow,
            sandbox=EngineSandbox.from_environment(hide=[self.state.root]),
        )
        attempt_fence: Callable[[str, float], Awaitable[int]] = fence_attempt
        if self.settings.ray_address is not None:
            self.ray = RayPlacement.wrap(
                self.settings.ray_address,
                self.cluster_key.public_text,
                runtimes,
                engines,
                self.state.store,
            )
            attempt_fence = self.ray.fence_attempt
        self.inference = InferenceServices(
            self.uow_factory,
            self.clock,
            runtimes,
            self.model_file,
            attempt_fence,
            engines,
            serve_instance=secrets.token_hex(8),
            upstream_allow=upstream_allow,
        )
        self.companion = Companion(
            self.uow_factory,
            self.clock,
            self._transport,
            self.cluster_key.public_text,
            self.settings.hypernet_bind,
        )
        link = CompanionChannel(self.companion)
        signer = ClusterSigner(self.cluster_key.public_key, self.cluster_key.sign)
        known = KnownPeers(self.uow_factory)
        context = FederationContext(self.uow_factory, self.clock, link, known)
        slots = GrantSlots()
        copies = RemoteGrantCopies(context)
        grants = Grants(
            context, slots, copies, on_grant_ended=self.inference.commands.stop_for_grant
        )
        pairing = Pairing(context, signer, verify_signature)
        approval = Approval(context, grants, signer)
        peers = Peers(context, grants)
        self.remote = RemoteClient(self.uow_factory, link, copies)
        self.transfers = Transfers(
            self.uow_factory,
            self.clock,
            self.remote,
            self.blobs,
            self.free_disk,
            range_bytes=self.settings.transfers.range_bytes,
            stall_seconds=self.settings.transfers.stall_seconds,
        )
        operations = PeerOperations(
            self.uow_factory,
            self.clock,
            Gate(self.uow_factory, self.clock, known, slots),
            Handlers(
                pairing=pairing,
                approval=approval,
                peers=peers,
                grants=grants,
                inference=InferenceOperations(self.uow_factory, self.inference),
                models=ModelOperations(self.uow_factory, self.clock, self.blobs, slots),
                transfers=self.transfers,
            ),
        )
        self.federation = Federation(
            known=known,
            slots=slots,
            pairing=pairing,
            approval=approval,
            grants=grants,
            peers=peers,
            overview=Overview(
                self.uow_factory, self.clock, self.companion, grants, copies, self.transfers.list
            ),
            operations=operations,
        )

    def free_disk(self) -> int:
        return shutil.disk_usage(self.state.store).free

    def _transport(self, agent_directory: Path, bind_address: str) -> Transport:
        return HyperNetEndpoint(
            agent_directory=agent_directory,
            cluster_key=self.cluster_key,
            lookup=self.federation.known.lookup,
            handler=self.federation.operations.serve,
            bind_address=bind_address,
            relay=self.settings.hypernet_relay,
            connect_timeout_seconds=self.settings.hypernet_connect_seconds,
            limits=self.settings.hypernet,
            body_bound=self.federation.known.body_bound,
        )

    def model_file(self, model: CatalogueModel) -> Path:
        """The file an engine loads for ``model``: its GGUF file (or its first file)."""
        files = model.manifest["files"]
        entry = next((f for f in files if str(f["path"]).endswith(".gguf")), files[0])
        digest = str(entry["sha256"])
        if self.blobs.has(digest):
            return self.blobs.blob_path(digest)
        return self.state.store / "missing" / digest

    async def start(self) -> None:
        """Bring what an earlier FICC process left to a known state, then rejoin peers."""
        if self.ray is not None:
            self.ray.nodes.connect()
            await self.ray.record_nodes(self.uow_factory, self.clock)
        else:
            await nodes.register_local_node(
                self.uow_factory, self.clock, probe_capacity, new_node_id()
            )
        self._node_refresher = asyncio.create_task(self._refresh_nodes())
        await self.inference.recover()
        await self.transfers.recover()
        peers = await self.federation.known.load()
        await self.federation.grants.load(peers)
        await self.federation.approval.purge_offers()
        await self.companion.restore()

    def resolve_user_path(self, path: str, *, field: str) -> Path:
        """The local owner may import any regular file this process can read."""
        return resolve_user_path(path, None, field=field)

    @property
    def state(self) -> StateDir:
        return self.settings.state

    async def _refresh_nodes(self) -> None:
        """Keep the nodes current: the local node's free memory, or Ray's nodes as they come
        and go."""
        while True:
            if self.ray is not None:
                await asyncio.sleep(self.ray.refresh_seconds)
                await self.ray.record_nodes(self.uow_factory, self.clock)
                continue
            await asyncio.sleep(NODE_REFRESH_SECONDS)
            await nodes.register_local_node(
                self.uow_factory, self.clock, probe_capacity, new_node_id()
            )

    async def close(self) -> None:
        if self._node_refresher is not None:
            self._node_refresher.cancel()
            await asyncio.gather(self._node_refresher, return_exceptions=True)
        await self.transfers.close()
        self.federation.grants.close()
        await self.companion.stop()
        await self.inference.close()
        await self.inference.engines.aclose()
        if self.ray is not None:
            self.ray.nodes.disconnect()
        await self.database.dispose()


async def initialise(settings: Settings, *, label: str | None = None) -> InitResult:
    """Create the state directory once; on an initialised directory change nothing."""
    state = settings.state
    state.create()
    database = Database(settings.database)
    try:
        await upgrade_schema(database)
        uow_factory = SqlUnitOfWorkFactory(database)
        created_key = not state.cluster_key.exists()
        if created_key:
            ClusterKey.generate().save(state.cluster_key)
        key = ClusterKey.load(state.cluster_key)
        async with uow_factory() as uow:
            owner, created_owner = await accounts.ensure_owner(uow, system_clock)
            stored_label = await uow.settings.get(LABEL_SETTING)
            if not isinstance(stored_label, str):
                stored_label = label or f"ficc-{key.public_text[:8]}"
                await uow.settings.put(LABEL_SETTING, stored_label)
            issued = None
            if not state.owner_token.exists():
                issued = await accounts.mint_token(
                    uow,
                    system_clock,
                    user=owner,
                    scopes=frozenset(LOCAL_SCOPES),
                    projects=frozenset({ALL_PROJECTS}),
                    lifetime_seconds=None,
                    actor="init",
                    owner=True,
                )
            elif (written := state.read_private_owner_token()) is not None:
                # A database from before tokens carried the owner mark: the token in
                # owner.token is the one init wrote.
                await accounts.adopt_owner_token(uow, written)
            await uow.commit()
        if issued is not None:
            state.write_owner_token(issued.token)
        return InitResult(
            state_dir=state.root,
            created=created_key or created_owner or issued is not None,
            label=stored_label,
            cluster_key=key.public_text,
        )
    finally:
        await database.dispose()


async def open_cluster(settings: Settings, *, clock: Clock = system_clock) -> Cluster:
    """Initialise if needed, migrate, and wire the parts a server needs."""
    await initialise(settings)
    database = Database(settings.database)
    await database.migrate()
    uow_factory = SqlUnitOfWorkFactory(database)
    async with uow_factory() as uow:
        label = await uow.settings.get(LABEL_SETTING)
    return Cluster(
        settings=settings,
        database=database,
        uow_factory=uow_factory,
        cluster_key=ClusterKey.load(settings.state.cluster_key),
        clock=clock,
        label=str(label or ""),
    )


@dataclass
class RayPlacement:
    """FICC on a Ray cluster: its node source and the runtimes that place replicas on nodes.

    Ray is imported only here, and only with ``--ray``: the default serve never loads it.
    """

    nodes: RayNodes
    runtimes: list[RayRuntime]
    refresh_seconds: float

    @classmethod
    def wrap(
        cls,
        address: str,
        cluster_key_text: str,
        runtimes: dict[RuntimeName, Runtime],
        engines: EngineClients,
        store: Path,
    ) -> RayPlacement:
        """Replace the engine runtimes in ``runtimes`` with their Ray-placed forms."""
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        from ficc.adapters.ray_nodes import RAY_NODE_REFRESH_SECONDS, RayNodes, namespace_of
        from ficc.adapters.runtimes.ray import RayRuntime
        from ficc.adapters.runtimes.supervised import SupervisedRuntime

        ray_nodes = RayNodes(address, namespace_of(cluster_key_text))
        placed: list[RayRuntime] = []
        for name, runtime in list(runtimes.items()):
            if isinstance(runtime, SupervisedRuntime):
                log_dir = runtime.log_path("x").parent
                wrapped = RayRuntime(
                    runtime, ray_nodes, log_dir=log_dir, store=store, engines=engines
                )
                runtimes[name] = wrapped
                placed.append(wrapped)
        return cls(ray_nodes, placed, RAY_NODE_REFRESH_SECONDS)

    async def record_nodes(self, uow_factory: SqlUnitOfWorkFactory, clock: Clock) -> None:
        """Ask Ray for its nodes and record them; the ones that left become unavailable."""
        observed = await asyncio.to_thread(self.nodes.observe)
        await nodes.record_observed_nodes(
            uow_factory, clock, self.nodes.as_nodes(observed, clock())
        )

    async def fence_attempt(self, attempt_id: str, grace_seconds: float) -> int:
        """End an unrecorded attempt's actor, and any engine of it on this machine."""
        ended = 0
        for runtime in self.runtimes:
            ended += await runtime.fence_attempt(attempt_id, grace_seconds)
        return ended + await fence_attempt(attempt_id, grace_seconds)


def new_node_id() -> str:
    return new_id("node", secrets.token_bytes(16))


async def probe_capacity() -> Capacity:
    """This machine's capacity, as the node registry records it."""
    probe = await probe_node()
    return Capacity(
        hostname=socket.gethostname(),
        cpu_count=probe.cpu_count,
        memory_bytes=probe.memory_bytes,
        memory_available_bytes=probe.memory_available_bytes,
        gpus=tuple(
            Gpu(
                index=gpu.index,
                name=gpu.name,
                memory_bytes=gpu.memory_bytes,
                memory_used_bytes=gpu.memory_used_bytes,
            )
            for gpu in probe.gpus
        ),
    )
