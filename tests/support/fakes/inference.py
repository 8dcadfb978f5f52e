"""A runtime and an engine that run in process, so that supervision is tested in milliseconds.

:class:`FakeRuntime` launches "replicas" that are only futures: a test decides when each one
is ready, whether it comes up healthy, and when it crashes. :class:`FakeEngine` answers
completions and streams from a script, and counts what is open.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.fakes.clock import FakeClock
from tests.support.fakes.unit_of_work import FakeStore, FakeUnitOfWorkFactory

from ficc.base.errors import Conflict, EngineUnavailable
from ficc.base.ids import new_id
from ficc.base.units import GiB
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.inference import RestartPolicy, RuntimeName
from ficc.domain.manifests import build_manifest
from ficc.domain.nodes import Node
from ficc.domain.service_records import ServiceRecord
from ficc.services.inference import Actor, InferenceServices, Supervision
from ficc.services.ports import EngineAddress
from ficc.services.ports.runtimes import (
    Availability,
    FenceResult,
    Health,
    HealthState,
    LaunchRequest,
    NodeInfo,
    ProcessIdentity,
    ReplicaExit,
    ReplicaHandle,
)


@dataclass
class FakeReplica:
    """One launched replica: ``ready`` and ``exited`` are the test's levers."""

    handle: ReplicaHandle
    request: LaunchRequest
    ready: asyncio.Future[Health] = field(default_factory=asyncio.Future)
    exited: asyncio.Future[ReplicaExit] = field(default_factory=asyncio.Future)

    def become_healthy(self) -> None:
        if not self.ready.done():
            self.ready.set_result(Health(HealthState.HEALTHY))

    def fail_health(self, reason: str) -> None:
        if not self.ready.done():
            self.ready.set_result(Health(HealthState.UNHEALTHY, reason))

    def crash(self, exit_code: int = 1) -> None:
        if not self.exited.done():
            self.exited.set_result(ReplicaExit(crashed=True, exit_code=exit_code, signal=None))


class FakeRuntime:
    """A runtime whose replicas live as long as the test says.

    ``healthy_at_once``: every replica is ready as soon as it is launched.
    ``refuse``: every launch is refused with this reason (nothing runs).
    ``unavailable``: reasons the runtime gives against every node.
    """

    def __init__(
        self,
        name: RuntimeName = RuntimeName.LLAMA_CPP,
        *,
        healthy_at_once: bool = True,
        refuse: str | None = None,
        unavailable: tuple[str, ...] = (),
    ) -> None:
        self._name = name
        self.healthy_at_once = healthy_at_once
        self.refuse = refuse
        self.unavailable = unavailable
        self.replicas: list[FakeReplica] = []
        self.launched = asyncio.Event()
        self.stopped: list[str] = []
        self.fenced: list[ProcessIdentity] = []

    @property
    def name(self) -> RuntimeName:
        return self._name

    def running(self) -> list[FakeReplica]:
        """Replicas launched and not yet ended."""
        return [r for r in self.replicas if not r.exited.done()]

    async def availability(self, node: NodeInfo) -> Availability:
        return Availability(self.unavailable)

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        if self.refuse is not None:
            raise Conflict(self.refuse)
        port = 20000 + len(self.replicas)
        handle = ReplicaHandle(
            attempt_id=request.attempt_id,
            runtime=self._name,
            base_url=f"http://127.0.0.1:{port}",
            model_name=request.model_name,
            process=ProcessIdentity(pid=100000 + len(self.replicas), start_ticks=1),
            port=port,
        )
        replica = FakeReplica(handle, request)
        if self.healthy_at_once:
            replica.become_healthy()
        self.replicas.append(replica)
        self.launched.set()
        return handle

    def replica(self, handle: ReplicaHandle) -> FakeReplica:
        return next(r for r in self.replicas if r.handle == handle)

    async def wait_ready(self, handle: ReplicaHandle, timeout_seconds: float) -> Health:
        return await asyncio.shield(self.replica(handle).ready)

    async def health(self, handle: ReplicaHandle) -> Health:
        ready = self.replica(handle).ready
        return ready.result() if ready.done() else Health(HealthState.STARTING)

    async def wait_exited(self, handle: ReplicaHandle) -> ReplicaExit:
        return await asyncio.shield(self.replica(handle).exited)

    async def stop(self, handle: ReplicaHandle, grace_seconds: float) -> ReplicaExit:
        replica = self.replica(handle)
        self.stopped.append(handle.attempt_id)
        if not replica.exited.done():
            replica.exited.set_result(ReplicaExit(crashed=False, exit_code=0, signal=None))
        return replica.exited.result()

    def log_tail(self, handle: ReplicaHandle, lines: int = 40) -> list[str]:
        return [f"log of {handle.attempt_id}"]

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        self.fenced.append(process)
        return FenceResult.KILLED


@dataclass(frozen=True)
class FakeEvent:
    data: str
    done: bool = False

    def payload(self) -> dict[str, Any]:
        """As the real event's: an engine's text that is not JSON is the engine's failure."""
        try:
            value = json.loads(self.data)
        except ValueError as exc:
            raise EngineUnavailable("the engine sent an event that is not JSON") from exc
        if not isinstance(value, dict):
            raise EngineUnavailable("the engine sent an event that is not a JSON object")
        return value


class FakeStream:
    """A scripted engine stream; ``closed`` is set when the caller leaves it."""

    def __init__(self, chunks: list[str]) -> None:
        self._chunks = chunks
        self.closed = asyncio.Event()
        self._done = False

    async def _events(self) -> AsyncIterator[FakeEvent]:
        for chunk in self._chunks:
            yield FakeEvent(chunk)
        self._done = True
        yield FakeEvent("[DONE]", done=True)

    def __aiter__(self) -> AsyncIterator[FakeEvent]:
        return self._events()

    async def aclose(self) -> None:
        self.closed.set()

    def ready(self) -> bool:
        return False

    def ended(self) -> bool:
        return self._done


class FakeEngine:
    """An engine connector that answers from memory and records which replica was called."""

    def __init__(self, chunks: list[str] | None = None) -> None:
        self.chunks = chunks or ["hello"]
        self.calls: list[str] = []
        self.requests: list[tuple[str, dict[str, Any]]] = []
        """Each request's engine path and body, in order."""
        self.streams: list[FakeStream] = []
        self.counted: list[str] = []
        """Each text whose tokens were counted."""
        self.release = asyncio.Event()
        self.release.set()

    async def open_stream(
        self, engine: EngineAddress, path: str, body: Mapping[str, Any]
    ) -> FakeStream:
        self.calls.append(engine.base_url)
        self.requests.append((path, dict(body)))
        stream = FakeStream(list(self.chunks))
        self.streams.append(stream)
        return stream

    async def complete(
        self,
        engine: EngineAddress,
        path: str,
        body: Mapping[str, Any],
        *,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        self.calls.append(engine.base_url)
        self.requests.append((path, dict(body)))
        await self.release.wait()
        model = engine.model_name
        return {"id": secrets.token_hex(4), "model": model, "text": "".join(self.chunks)}

    async def count_tokens(self, engine: EngineAddress, text: str) -> int | None:
        """One token per word: what the metering tests count prompts with."""
        self.counted.append(text)
        return len(text.split())

    async def aclose(self) -> None:
        return None


# --- a whole InferenceServices over fakes ------------------------------------------------------


OWNER = Actor("owner:test")
PROJECT = "default"


@dataclass
class Bench:
    """Inference services over a fake store, runtime, engine and clock, and their levers."""

    services: InferenceServices
    store: FakeStore
    runtime: FakeRuntime
    engine: FakeEngine
    clock: FakeClock
    models_dir: Path
    fenced_attempts: list[str]
    restarts: list[RestartPolicy] = field(default_factory=list)

    async def add_node(
        self, *, node_id: str = "", cpu_count: int = 8, memory_bytes: int = 16 * GiB
    ) -> Node:
        node_id = node_id or new_id("node", secrets.token_bytes(16))
        node = Node(
            id=node_id,
            name=node_id,
            cpu_count=cpu_count,
            memory_bytes=memory_bytes,
            memory_available_bytes=memory_bytes,
            gpus=(),
            is_local=True,
            updated_at=self.clock(),
        )
        self.store.nodes[node.id] = node
        return node

    async def add_model(self, size: int, *, model_id: str = "") -> CatalogueModel:
        """A catalogue model declaring ``size`` bytes, owned by the project, its file present."""
        digest = secrets.token_hex(32)
        model_id = model_id or new_id("model", secrets.token_bytes(16))
        manifest = build_manifest("tiny", "gguf", [("tiny.gguf", size, digest)], {})
        model = CatalogueModel.of_manifest(model_id, PROJECT, manifest, self.clock())
        self.store.models[model.id] = model
        self.store.blob_refs.add((PROJECT, digest))
        (self.models_dir / model.id).write_bytes(b"gguf")
        return model

    async def create(self, model: CatalogueModel, **spec: Any) -> dict[str, Any]:
        data = {"name": "svc", "model": model.id, "runtime": "llama.cpp", **spec}
        view, _ = await self.services.commands.create_service(OWNER, PROJECT, data)
        return view

    async def control(self, service_id: str, operation: str, **extra: Any) -> dict[str, Any]:
        revision = self.store.services[service_id].revision
        view, _ = await self.services.commands.control_service(
            OWNER, PROJECT, service_id, revision=revision, operation=operation, **extra
        )
        return view

    def service(self, service_id: str) -> ServiceRecord:
        return self.store.services[service_id]

    async def until(self, condition: Callable[[], bool], *, ticks: int = 1000) -> None:
        """Let background work run until ``condition`` holds; everything here is in memory,
        so it holds within a few loop turns or never."""
        for _ in range(ticks):
            if condition():
                return
            await asyncio.sleep(0)
        raise AssertionError("the condition never held")


def bench(
    tmp_path: Path,
    *,
    runtime: FakeRuntime | None = None,
    grace: float = 1.0,
    clock: FakeClock | None = None,
    store: FakeStore | None = None,
) -> Bench:
    """Inference services whose every collaborator is a fake; ``store``: the database of an
    earlier bench, as a FICC process started again finds it."""
    store = store or FakeStore()
    clock = clock or FakeClock()
    restarts: list[RestartPolicy] = []
    runtime = runtime or FakeRuntime()
    engine = FakeEngine()
    fenced: list[str] = []

    async def fence(attempt_id: str, _grace: float) -> int:
        fenced.append(attempt_id)
        return 1

    def model_path(model: CatalogueModel) -> Path:
        return tmp_path / model.id

    services = InferenceServices(
        FakeUnitOfWorkFactory(store),
        clock,
        {runtime.name: runtime},
        model_path,
        fence,
        engine,
        Supervision("bench", stop_grace_seconds=grace, on_restart=restarts.append),
    )
    return Bench(services, store, runtime, engine, clock, tmp_path, fenced, restarts)
