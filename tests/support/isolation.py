"""The fast tier of the isolation tests: a grantor wired in process over a real SQLite file.

Peers and grants are written straight into the database (no transport): the grantor's rules
are then driven through ``PeerOperations.serve`` exactly as a proven session would drive
them. A fake runtime stands in for engines: admission rules refuse before any launch.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ficc.base.canonical import canonical_json
from ficc.base.errors import Conflict, FiccError
from ficc.base.ids import new_id
from ficc.base.units import GiB
from ficc.bootstrap import Cluster, Settings, open_cluster
from ficc.domain import grants as g
from ficc.domain import peers as p
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.grants import GrantState
from ficc.domain.inference import RuntimeName, ServiceState
from ficc.domain.manifests import build_manifest
from ficc.domain.nodes import Node
from ficc.domain.peers import PeerRole, PeerState
from ficc.domain.receipts import b64
from ficc.services.inference import InferenceServices, Supervision
from ficc.services.ports.peers import EncodedAnswer, PeerIdentity
from ficc.services.ports.runtimes import (
    Availability,
    FenceResult,
    Health,
    LaunchRequest,
    NodeInfo,
    ProcessIdentity,
    ReplicaExit,
    ReplicaHandle,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def grantor(tmp_path: Path) -> Cluster:
    """A cluster's wired services over a real SQLite file (no server, no transport)."""
    return await open_cluster(Settings(state_dir=tmp_path / "grantor"))


@dataclass(frozen=True)
class PeerOf:
    """A paired peer as the grantor records it, and the identity its sessions prove."""

    id: str
    identity: PeerIdentity


async def paired_peer(cluster: Cluster, project: str = "default") -> PeerOf:
    """A peer paired with ``cluster`` in ``project``; its key is random, never used to sign."""
    hypernet_id = secrets.token_hex(32)
    cluster_key = secrets.token_bytes(32)
    generation = 7
    peer = p.Peer(
        id=new_id("peer", secrets.token_bytes(16)),
        project=project,
        label="peer",
        hypernet_id=hypernet_id,
        cluster_key=b64(cluster_key),
        state=PeerState.PAIRED,
        generation=generation,
        role=PeerRole.SERVICE,
        offer_id=None,
        selected_grant=None,
        ticket=None,
        created_at=NOW,
        updated_at=NOW,
    )
    async with cluster.uow_factory() as uow:
        await uow.peers.add(peer)
        await uow.commit()
    await cluster.federation.known.load()
    return PeerOf(peer.id, PeerIdentity(hypernet_id, cluster_key, generation))


async def give_grant(
    cluster: Cluster, peer: PeerOf, project: str = "default", **terms: Any
) -> g.Grant:
    """A grant to ``peer`` with ``terms`` (``scopes`` defaults to every remote scope)."""
    terms.setdefault("scopes", sorted(g.REMOTE_SCOPES))
    parsed = g.parse_grant(terms)
    now = datetime.now(UTC)
    grant = g.Grant(
        id=new_id("grant", secrets.token_bytes(16)),
        project=project,
        peer_id=peer.id,
        terms=parsed,
        state=GrantState.ACTIVE,
        created_at=now,
        expires_at=g.expiry_of(now, parsed),
        revoked_at=None,
        requests_used=0,
        transfer_bytes_used=0,
    )
    async with cluster.uow_factory() as uow:
        await uow.grants.add(grant)
        await uow.commit()
    return grant


async def stored_grant(cluster: Cluster, grant_id: str) -> g.Grant:
    async with cluster.uow_factory() as uow:
        grant = await uow.grants.get(grant_id)
    assert grant is not None
    return grant


async def serve(
    cluster: Cluster,
    peer: PeerOf,
    grant_id: str,
    operation: str,
    body: dict[str, Any],
    mutation_id: str | None = None,
) -> dict[str, Any]:
    """One request as the grantor serves it; a streamed answer is read to its end."""
    wire: dict[str, Any] = {"grant": grant_id, "body": body}
    if mutation_id is not None:
        wire["mutation_id"] = mutation_id
    answer = await cluster.federation.operations.serve(
        peer.identity, operation, wire, len(canonical_json(wire))
    )
    if isinstance(answer, EncodedAnswer):
        return dict(json.loads(answer.content))
    if isinstance(answer, dict):
        return answer
    received = 0
    async for chunk in answer:
        received += len(chunk)
    return {"streamed_bytes": received}


async def refusal(work: Any) -> FiccError:
    """The FiccError ``work`` (an awaitable) ends with."""
    try:
        await work
    except FiccError as exc:
        return exc
    raise AssertionError("the request was not refused")


async def add_node(
    cluster: Cluster,
    *,
    cpu_count: int = 2,
    memory_bytes: int = 4 * GiB,
    memory_available_bytes: int | None = None,
) -> Node:
    """The local node, with the capacity a test decides."""
    node = Node(
        id=new_id("node", secrets.token_bytes(16)),
        name="test-node",
        cpu_count=cpu_count,
        memory_bytes=memory_bytes,
        memory_available_bytes=memory_bytes
        if memory_available_bytes is None
        else memory_available_bytes,
        gpus=(),
        is_local=True,
        updated_at=NOW,
    )
    async with cluster.uow_factory() as uow:
        await uow.nodes.upsert(node)
        await uow.commit()
    return node


async def record_model(
    cluster: Cluster,
    project: str,
    sizes: list[int],
    *,
    owned: bool,
    metadata: dict[str, Any] | None = None,
    digests: list[str] | None = None,
) -> CatalogueModel:
    """A catalogue record declaring files of ``sizes``; ``owned``: its blobs are the project's.

    Without ``digests``, each file is a small blob really stored, whatever size is declared:
    admission reads the declared sizes, and a launch needs the blob present.
    """
    if digests is None:
        digests = [await _small_blob(cluster) for _ in sizes]
    files = [(f"part{index}.gguf", size, digests[index]) for index, size in enumerate(sizes)]
    manifest = build_manifest("declared", "gguf", files, metadata or {})
    model = CatalogueModel.of_manifest(
        new_id("model", secrets.token_bytes(16)), project, manifest, NOW
    )
    async with cluster.uow_factory() as uow:
        if not await uow.projects.exists(project):
            await uow.projects.add(project, NOW)
        await uow.models.add(model)
        if owned:
            await uow.models.own_blobs(project, model.blob_digests())
        await uow.commit()
    return model


async def _small_blob(cluster: Cluster) -> str:
    source = cluster.settings.state_dir / f"source-{secrets.token_hex(8)}.gguf"
    source.write_bytes(secrets.token_bytes(64))
    digest, _ = await asyncio.to_thread(cluster.blobs.import_file, source)
    source.unlink()
    return str(digest)


async def set_state(cluster: Cluster, service_id: str, state: ServiceState) -> None:
    """Put a service in ``state`` as if its engines had come up (a rule test needs no engine)."""
    async with cluster.uow_factory() as uow:
        service = await uow.services.get(service_id)
        assert service is not None
        await uow.services.update(replace(service, state=state))
        await uow.commit()


@dataclass
class RefusingRuntime:
    """A runtime that is available everywhere and records every launch it is asked for.

    Admission must refuse before a launch: a test asserts ``launches`` stayed empty.
    """

    launches: list[LaunchRequest] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> RuntimeName:
        return RuntimeName.LLAMA_CPP

    async def availability(self, node: NodeInfo) -> Availability:
        return Availability()

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        self.launches.append(request)
        self.asked.set()
        raise Conflict("this test runtime launches nothing")

    async def wait_ready(self, handle: ReplicaHandle, timeout_seconds: float) -> Health:
        raise AssertionError("never launched")

    async def health(self, handle: ReplicaHandle) -> Health:
        raise AssertionError("never launched")

    async def wait_exited(self, handle: ReplicaHandle) -> ReplicaExit:
        raise AssertionError("never launched")

    async def stop(self, handle: ReplicaHandle, grace_seconds: float) -> ReplicaExit:
        return ReplicaExit(crashed=False, exit_code=0, signal=None)

    def log_tail(self, handle: ReplicaHandle, lines: int = 20) -> list[str]:
        return []

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        return FenceResult.ABSENT


def admission_services(cluster: Cluster, runtime: RefusingRuntime) -> InferenceServices:
    """The inference use cases of ``cluster`` with ``runtime`` in place of real engines."""

    async def fence(_attempt: str, _grace: float) -> int:
        return 0

    return InferenceServices(
        cluster.uow_factory,
        cluster.clock,
        {RuntimeName.LLAMA_CPP: runtime},  # type: ignore[dict-item]
        cluster.model_file,
        fence,
        cluster.inference.engines,
        Supervision("test"),
    )
