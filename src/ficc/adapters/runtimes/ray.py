"""Replicas as Ray actors: an engine runtime (llama.cpp, vLLM) run on a node of a Ray cluster.

Each replica is a named, detached actor pinned to its node (``NodeAffinitySchedulingStrategy``,
``soft=False``) that reserves the replica's CPUs, GPUs and memory. The actor verifies the model
file by its digest, starts the engine as its child and reports its port and pid; FICC then
reaches the engine over HTTP with the attempt's API key exactly as it does a local one. The key
travels as an actor call's argument into the engine's environment, never on a command line.

An engine on a node of FICC's own machine listens on 127.0.0.1; on a node at another address it
listens on that node's address (Ray's node IP), where FICC reaches it; a node lacking the model
receives it first (:mod:`.ray_calls`).

An actor that dies (``kill -9``, its node removed) ends the replica as a crash naming the cause;
the engine dies with it (parent-death signal). Actors are named after their attempt in FICC's
fixed namespace and outlive FICC's driver: a restarted FICC, or a standby taking over, adopts
the replica whose actor still holds the recorded engine (pid and start time) answering the
attempt's key, and supervises it as its own; any other it finds is fenced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import ray
from ray.exceptions import RayError
from ray.util import list_named_actors
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.ray_nodes import RayNode, RayNodes
from ficc.adapters.runtimes.processes import fence as fence_local_process
from ficc.adapters.runtimes.ray_calls import CALL_TIMEOUT_SECONDS, call, first_line, place_model
from ficc.adapters.runtimes.ray_replica import EngineHost
from ficc.adapters.runtimes.supervised import SupervisedRuntime
from ficc.base.errors import Conflict, FiccError, InvalidInput
from ficc.base.ids import parse_id
from ficc.domain.inference import (
    DEFAULT_LLAMA_CPP_THREADS,
    ENGINE_OVERHEAD_BYTES,
    RuntimeName,
)
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

log = logging.getLogger(__name__)

ACTOR_PREFIX: Final = "ficc-replica-"
PLACEMENT_TIMEOUT_SECONDS: Final = 60.0
"""How long Ray may take to place a replica's actor (and start its worker) on the node."""
KILL_WAIT_SECONDS: Final = 5.0
LOOPBACK: Final = "127.0.0.1"
HOST_FLAG: Final = "--host"


def actor_name(attempt_id: str) -> str:
    """The name of an attempt's actor in FICC's namespace."""
    return ACTOR_PREFIX + attempt_id


@dataclass
class _Replica:
    actor: Any
    exit: asyncio.Task[ReplicaExit]


def bound_to(argv: list[str], host: str) -> list[str]:
    """``argv`` with the engine's listen address (the value after ``--host``) set to ``host``.

    The engines' commands name loopback; a node on another machine needs its own address.
    """
    if HOST_FLAG not in argv[:-1]:
        raise InvalidInput(f"the engine's command has no {HOST_FLAG} to bind", field="runtime")
    index = argv.index(HOST_FLAG) + 1
    return [*argv[:index], host, *argv[index + 1 :]]


class RayRuntime(SupervisedRuntime):
    """Runs ``inner``'s engine on Ray nodes; health, stop and fence as for a local engine."""

    def __init__(
        self,
        inner: SupervisedRuntime,
        nodes: RayNodes,
        *,
        log_dir: Path,
        store: Path,
        engines: EngineClients | None = None,
        placement_timeout_seconds: float = PLACEMENT_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(log_dir=log_dir, engines=engines, sandbox=inner.sandbox)
        self._inner = inner
        self._nodes = nodes
        self._store = store
        self._placement_timeout = placement_timeout_seconds
        self._replicas: dict[str, _Replica] = {}
        self._actor_class = ray.remote(EngineHost)

    @property
    def name(self) -> RuntimeName:
        """The wrapped engine's runtime name: a service does not say where it runs."""
        return self._inner.name

    def command(self, request: LaunchRequest, port: int, listen_fd: int | None = None) -> list[str]:
        """The wrapped engine's command line (on a Ray node the engine binds its own port)."""
        return self._inner.command(request, port, listen_fd)

    def api_key_environment(self, api_key: str) -> dict[str, str]:
        """The wrapped engine's API key variable."""
        return self._inner.api_key_environment(api_key)

    def _ray_node(self, node: NodeInfo) -> tuple[RayNode | None, list[str]]:
        ray_node = self._nodes.find(node.node_id)
        if ray_node is None:
            return None, [f"node {node.node_id} is not a node of the Ray cluster"]
        reasons = []
        if not ray_node.alive:
            reasons.append(f"node {node.node_id} left the Ray cluster")
        return ray_node, reasons

    def _listen_host(self, ray_node: RayNode) -> str:
        """Loopback on FICC's own machine; the node's address on another one."""
        return LOOPBACK if ray_node.address == self._nodes.driver_address() else ray_node.address

    async def availability(self, node: NodeInfo) -> Availability:
        """A live Ray node where the wrapped engine is installed (on every node: one image)."""
        ray_node, reasons = self._ray_node(node)
        on_node = NodeInfo(
            node_id=node.node_id,
            local=True,
            gpu_count=node.gpu_count if ray_node is None else len(ray_node.capacity.gpus),
        )
        reasons += (await self._inner.availability(on_node)).reasons
        return Availability(tuple(reasons))

    def _resources(self, request: LaunchRequest) -> dict[str, Any]:
        """What the actor reserves on its node: the replica's share of FICC's admission."""
        model_bytes = request.model_path.stat().st_size if request.model_path else 0
        if self.name is RuntimeName.VLLM:
            return {"num_cpus": 1, "num_gpus": 1, "memory": model_bytes + ENGINE_OVERHEAD_BYTES}
        threads = int(request.options.get("n_threads", DEFAULT_LLAMA_CPP_THREADS))
        return {"num_cpus": threads, "memory": model_bytes + ENGINE_OVERHEAD_BYTES}

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        """Create the pinned actor, let it verify the model and start the engine."""
        reasons = list((await self.availability(request.node)).reasons)
        ray_node = self._nodes.find(request.node.node_id)
        if reasons or ray_node is None:
            raise Conflict(
                f"runtime {self.name.value} cannot run here: {'; '.join(reasons)}",
                details={"runtime": self.name.value, "reasons": reasons},
            )
        if request.model_path is None:
            raise InvalidInput(f"runtime {self.name.value} needs a model file", field="model")
        parse_id("attempt", request.attempt_id, field="attempt_id")
        if request.attempt_id in self._replicas:
            raise Conflict(f"attempt {request.attempt_id} was launched already")
        host = self._listen_host(ray_node)
        actor: Any = self._actor_class.options(
            name=actor_name(request.attempt_id),
            lifetime="detached",
            max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node.ray_node_id, soft=False),
            **self._resources(request),
        ).remote()
        try:
            port = await call(actor.reserve_port.remote(host), self._placement_timeout)
            # FICC's own store is the default only for a node on FICC's machine.
            default_store = str(self._store) if host == LOOPBACK else None
            model_path = await place_model(actor, request.model_path, default_store)
            log_path = self.log_path(request.attempt_id, request.model_name)
            # Another machine has no FICC state directory: its log goes to the node's store.
            node_log = log_path if host == LOOPBACK else log_path.relative_to(self._log_dir)
            api_key = secrets.token_urlsafe(32)
            variables = {"FICC_ATTEMPT": request.attempt_id, **self.api_key_environment(api_key)}
            argv = bound_to(self.command(replace(request, model_path=model_path), port), host)
            base_url = f"http://{host}:{port}"
            adoption = {"base_url": base_url, "port": port, "api_key": api_key}
            started = actor.start.remote(
                argv, variables, str(node_log), str(model_path), self.sandbox, adoption
            )
            pid, ticks = await call(started, CALL_TIMEOUT_SECONDS)
        except BaseException:
            # Refused, failed or cancelled before the engine is FICC's: nothing may stay.
            self._kill(actor)
            raise
        exit_task = asyncio.create_task(self._await_exit(actor, request.node.node_id))
        self._replicas[request.attempt_id] = _Replica(actor, exit_task)
        self._api_keys[request.attempt_id] = api_key
        if self._engines is not None:
            await self._engines.set_api_key(base_url, api_key)
        return ReplicaHandle(
            attempt_id=request.attempt_id,
            runtime=self.name,
            base_url=base_url,
            model_name=request.model_name,
            process=ProcessIdentity(pid, ticks),
            port=port,
            log_path=log_path,
        )

    async def _await_exit(self, actor: Any, node_id: str) -> ReplicaExit:
        """The engine's end as the actor reports it, or the actor's death as a crash."""
        try:
            ended: ReplicaExit = await actor.wait.remote()
            return ended
        except RayError as exc:
            ray_node = self._nodes.find(node_id)
            if ray_node is not None and not ray_node.alive:
                reason = f"node {node_id} left the Ray cluster"
            else:
                reason = f"its Ray actor died: {first_line(exc)}"
            return ReplicaExit(crashed=True, exit_code=None, signal=None, reason=reason)

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(RayError, ValueError):
            ray.kill(actor, no_restart=True)

    async def health(self, handle: ReplicaHandle) -> Health:
        """Exited once the actor or engine ended, else whether ``GET /v1/models`` answers."""
        replica = self._replicas.get(handle.attempt_id)
        if replica is not None and replica.exit.done():
            ended = replica.exit.result()
            return Health(HealthState.EXITED, reason=ended.describe(), exit=ended)
        return await self._probe(handle)

    async def wait_exited(self, handle: ReplicaHandle) -> ReplicaExit:
        """Return when the engine ends or its actor dies."""
        replica = self._replicas.get(handle.attempt_id)
        if replica is None:
            raise Conflict(f"attempt {handle.attempt_id} was not launched by this FICC process")
        return await asyncio.shield(replica.exit)

    async def stop(self, handle: ReplicaHandle, grace_seconds: float) -> ReplicaExit:
        """Ask the actor to stop its engine, then kill the actor; safe to repeat."""
        replica = self._replicas.pop(handle.attempt_id, None)
        await self._forget(handle)
        if replica is None:
            if handle.process is not None:
                await self.fence(handle.process, grace_seconds)
            return ReplicaExit(crashed=False, exit_code=None, signal=None)
        ended: ReplicaExit | None = None
        if not replica.exit.done():
            with contextlib.suppress(FiccError):
                ended = await call(
                    replica.actor.stop.remote(grace_seconds), grace_seconds + KILL_WAIT_SECONDS
                )
        self._kill(replica.actor)
        if ended is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_WAIT_SECONDS):
                    ended = await asyncio.shield(replica.exit)
        return ended or ReplicaExit(crashed=False, exit_code=None, signal=None)

    async def stop_all(self, grace_seconds: float) -> None:
        """Stop every replica this FICC process launched, together (FICC's shutdown)."""
        handles = [
            ReplicaHandle(attempt_id, self.name, "", "") for attempt_id in list(self._replicas)
        ]
        await asyncio.gather(*(self.stop(handle, grace_seconds) for handle in handles))

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        """End an earlier FICC run's replica: its actor when one holds that engine, else the
        process itself (pid and start time both checked)."""
        for name in await asyncio.to_thread(self._actor_names):
            actor = await asyncio.to_thread(self._get_actor, name)
            if actor is None:
                continue
            try:
                identity = await call(actor.identity.remote(), CALL_TIMEOUT_SECONDS)
            except FiccError:
                continue
            if identity == (process.pid, process.start_ticks):
                with contextlib.suppress(FiccError):
                    await call(actor.stop.remote(grace_seconds), grace_seconds + KILL_WAIT_SECONDS)
                self._kill(actor)
                return FenceResult.KILLED
        return await fence_local_process(process, grace_seconds)

    async def fence_attempt(self, attempt_id: str, grace_seconds: float) -> int:
        """End the actor of an attempt whose launch is not on record; the number ended."""
        actor = await asyncio.to_thread(self._get_actor, actor_name(attempt_id))
        if actor is None:
            return 0
        with contextlib.suppress(FiccError):
            await call(actor.stop.remote(grace_seconds), grace_seconds + KILL_WAIT_SECONDS)
        self._kill(actor)
        return 1

    async def adopt(
        self, attempt_id: str, process: ProcessIdentity, node_id: str, model_name: str
    ) -> ReplicaHandle | None:
        """Supervise an earlier FICC process's replica again: its actor (named after the
        attempt) still holds the recorded engine, and the engine answers the attempt's key."""
        actor = await asyncio.to_thread(self._get_actor, actor_name(attempt_id))
        if actor is None or attempt_id in self._replicas:
            return None
        try:
            found = await call(actor.adoption.remote(), CALL_TIMEOUT_SECONDS)
        except FiccError:
            return None  # dead, or an actor of a FICC without adoption: fenced as before
        if not isinstance(found, dict):
            return None
        base_url, api_key, port = found.get("base_url"), found.get("api_key"), found.get("port")
        if (
            (found.get("pid"), found.get("start_ticks")) != (process.pid, process.start_ticks)
            or not isinstance(base_url, str)
            or not isinstance(api_key, str)
            or not isinstance(port, int)
        ):
            return None
        handle = ReplicaHandle(
            attempt_id=attempt_id,
            runtime=self.name,
            base_url=base_url,
            model_name=model_name,
            process=process,
            port=port,
            log_path=self.log_path(attempt_id, model_name),
        )
        self._api_keys[attempt_id] = api_key
        if not (await self._probe(handle)).healthy:
            self._api_keys.pop(attempt_id, None)
            return None
        if self._engines is not None:
            await self._engines.set_api_key(base_url, api_key)
        exit_task = asyncio.create_task(self._await_exit(actor, node_id))
        self._replicas[attempt_id] = _Replica(actor, exit_task)
        return handle

    async def let_go(self, handle: ReplicaHandle) -> None:
        """Forget a replica, its actor and engine left running for the FICC process that owns
        (or fences) them now."""
        replica = self._replicas.pop(handle.attempt_id, None)
        await self._forget(handle)
        if replica is not None:
            replica.exit.cancel()

    def _actor_names(self) -> list[str]:
        named = list_named_actors(all_namespaces=False)
        return [str(name) for name in named if str(name).startswith(ACTOR_PREFIX)]

    def _get_actor(self, name: str) -> Any:
        try:
            return ray.get_actor(name, namespace=self._nodes.namespace)
        except ValueError:
            return None
