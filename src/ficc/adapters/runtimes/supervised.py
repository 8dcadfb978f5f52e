"""What the runtimes that launch a local engine process share: readiness, health, stop, fence.

A subclass says only how to build the command line and whether the node can run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ficc.adapters.engine_logs import engine_log_path
from ficc.adapters.engines.client import EngineClient, EngineTimeout
from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.runtimes.processes import (
    EngineProcess,
    bound_loopback_socket,
    engine_environment,
    fence,
    free_loopback_port,
    tail_lines,
)
from ficc.adapters.runtimes.sandbox import EngineSandbox
from ficc.base.errors import Conflict, FiccError, InvalidInput, NotFound
from ficc.base.ids import parse_id
from ficc.domain.inference import RuntimeName
from ficc.services.ports.runtimes import (
    DEFAULT_LOG_TAIL_LINES,
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

HEALTH_TIMEOUT: Final = EngineTimeout.each(2.0)
READY_POLL_SECONDS: Final = 0.1
"""The engine offers no readiness event; between two polls a crash still ends the wait at once."""
KEPT_LOGS_PER_SERVICE: Final = 5
"""Log files of a service's latest attempts kept; older ones are deleted at each launch."""


class SupervisedRuntime(ABC):
    """A runtime whose replicas are child processes of FICC serving HTTP on a loopback port."""

    def __init__(
        self,
        *,
        log_dir: Path,
        python: str = sys.executable,
        engines: EngineClients | None = None,
        sandbox: EngineSandbox | None = None,
    ) -> None:
        self._log_dir = log_dir
        self._python = python
        self._engines = engines
        self.sandbox = sandbox or EngineSandbox()
        """How engines are confined (:mod:`.sandbox`); FICC's state directory is among what
        it hides."""
        self._processes: dict[str, EngineProcess] = {}
        self._api_keys: dict[str, str] = {}

    @property
    @abstractmethod
    def name(self) -> RuntimeName:
        """The runtime this adapter implements."""

    @abstractmethod
    async def availability(self, node: NodeInfo) -> Availability:
        """Why this runtime cannot run on ``node`` now."""

    takes_bound_socket: bool = False
    """Whether the engine serves on a socket FICC binds and hands over (no port race); else it
    binds the port FICC chose itself, and another local process could take it first."""

    @abstractmethod
    def command(self, request: LaunchRequest, port: int, listen_fd: int | None = None) -> list[str]:
        """The engine's command line for ``request`` listening on 127.0.0.1:``port``; with
        ``listen_fd`` (runtimes that take a bound socket), on that socket, bound to the port."""

    @abstractmethod
    def api_key_environment(self, api_key: str) -> dict[str, str]:
        """The variable that gives the engine its API key (never argv: /proc shows argv to all)."""

    def api_key(self, handle: ReplicaHandle) -> str | None:
        """The key the engine of a live attempt answers to (None once it stopped)."""
        return self._api_keys.get(handle.attempt_id)

    def log_path(self, attempt_id: str, service: str | None = None) -> Path:
        """Where the engine of an attempt writes its output: one folder per service."""
        return engine_log_path(self._log_dir, attempt_id, service)

    def _prune_logs(self, service: str) -> None:
        """Keep the logs of a service's latest attempts; older ones only fill the disk."""
        folder = self.log_path("x", service).parent
        if folder == self._log_dir:
            return
        with contextlib.suppress(FileNotFoundError):
            logs = sorted(folder.glob("*.log"), key=lambda path: path.stat().st_mtime)
            running = {process.log_path for process in self._processes.values()}
            stale = [path for path in logs if path not in running]
            for path in stale[: max(0, len(logs) - KEPT_LOGS_PER_SERVICE)]:
                path.unlink(missing_ok=True)

    async def sandbox_refusal(self) -> str | None:
        """Why engines cannot be confined on this machine (tried once, off the loop)."""
        return await asyncio.to_thread(self.sandbox.refusal, self._python)

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        """Start the engine, confined; Conflict naming the reasons when this node cannot run it
        (among them a machine that cannot confine it)."""
        availability = await self.availability(request.node)
        if availability.available and (refusal := await self.sandbox_refusal()) is not None:
            availability = Availability((refusal,))
        if not availability.available:
            raise Conflict(
                f"runtime {self.name.value} cannot run here: {'; '.join(availability.reasons)}",
                details={"runtime": self.name.value, "reasons": list(availability.reasons)},
            )
        if request.model_path is None or not request.model_path.is_file():
            raise InvalidInput(
                f"runtime {self.name.value} needs the model's file on this node", field="model"
            )
        parse_id("attempt", request.attempt_id, field="attempt_id")  # it names the log file
        if request.attempt_id in self._processes:
            raise Conflict(f"attempt {request.attempt_id} was launched already")
        listener = bound_loopback_socket() if self.takes_bound_socket else None
        port = free_loopback_port() if listener is None else listener.getsockname()[1]
        base_url = f"http://127.0.0.1:{port}"
        log_path = self.log_path(request.attempt_id, request.model_name)
        # A fresh key per attempt: no other local process can call the engine, and a key seen
        # by whoever took the port before an engine binding its own port did opens no later
        # attempt.
        api_key = secrets.token_urlsafe(32)
        handed = () if listener is None else (listener.fileno(),)
        try:
            process = await EngineProcess.spawn(
                self.sandbox.command(
                    self.command(request, port, *handed),
                    reveal=[request.model_path],
                    private_network=listener is not None,  # it needs no network of its own
                    python=self._python,
                ),
                log_path=log_path,
                env=engine_environment(
                    {"FICC_ATTEMPT": request.attempt_id, **self.api_key_environment(api_key)}
                ),
                pass_fds=handed,
            )
        finally:
            if listener is not None:
                listener.close()  # the engine holds its own copy
        self._processes[request.attempt_id] = process
        self._api_keys[request.attempt_id] = api_key
        if self._engines is not None:
            await self._engines.set_api_key(base_url, api_key)
        self._prune_logs(request.model_name)
        return ReplicaHandle(
            attempt_id=request.attempt_id,
            runtime=self.name,
            base_url=base_url,
            model_name=request.model_name,
            process=process.identity,
            port=port,
            log_path=log_path,
        )

    def _process(self, handle: ReplicaHandle) -> EngineProcess | None:
        return self._processes.get(handle.attempt_id)

    async def _probe(self, handle: ReplicaHandle) -> Health:
        api_key = self.api_key(handle)
        async with EngineClient(handle.base_url, api_key=api_key, timeout=HEALTH_TIMEOUT) as client:
            try:
                listing = await client.list_models()
            except FiccError as exc:
                return Health(HealthState.UNHEALTHY, reason=exc.message)
        if not isinstance(listing.get("data"), list):
            return Health(HealthState.UNHEALTHY, reason="the engine's model list has no data")
        return Health(HealthState.HEALTHY)

    async def health(self, handle: ReplicaHandle) -> Health:
        """Exited if the process ended, else whether ``GET /v1/models`` answers."""
        process = self._process(handle)
        if process is not None and process.returncode is not None:
            ended = process.exit_info(process.returncode)
            return Health(HealthState.EXITED, reason=ended.describe(), exit=ended)
        return await self._probe(handle)

    async def wait_ready(self, handle: ReplicaHandle, timeout_seconds: float) -> Health:
        """Poll until healthy; a crash ends the wait at once with its exit and log lines."""
        process = self._process(handle)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        health = Health(HealthState.STARTING, reason="the engine has not answered yet")
        while loop.time() < deadline:
            health = await self.health(handle)
            if health.state in {HealthState.HEALTHY, HealthState.EXITED}:
                return health
            if process is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(READY_POLL_SECONDS):
                        await process.wait()
            else:
                await asyncio.sleep(READY_POLL_SECONDS)
        reason = f"not ready after {timeout_seconds:g} s: {health.reason}"
        return Health(HealthState.STARTING, reason=reason)

    async def wait_exited(self, handle: ReplicaHandle) -> ReplicaExit:
        """Return as soon as the engine process ends."""
        process = self._process(handle)
        if process is None:
            raise NotFound(
                f"attempt {handle.attempt_id} was not launched by this FICC process; fence it"
            )
        return await process.wait()

    async def stop(self, handle: ReplicaHandle, grace_seconds: float) -> ReplicaExit:
        """SIGTERM to the engine's process group, SIGKILL after the grace period."""
        process = self._process(handle)
        if process is None:
            await self._forget(handle)
            if handle.process is not None:
                await fence(handle.process, grace_seconds)
            return ReplicaExit(
                crashed=False,
                exit_code=None,
                signal=None,
                log_tail=tuple(tail_lines(handle.log_path)),
            )
        ended = await process.stop(grace_seconds)
        del self._processes[handle.attempt_id]
        await self._forget(handle)
        return ended

    async def _forget(self, handle: ReplicaHandle) -> None:
        """The engine is gone: its key opens nothing, and its clients are closed."""
        self._api_keys.pop(handle.attempt_id, None)
        if self._engines is not None:
            await self._engines.forget(handle.base_url)

    async def stop_all(self, grace_seconds: float) -> None:
        """Stop every engine this runtime launched, together (FICC's shutdown)."""
        processes = list(self._processes.values())
        self._processes.clear()
        self._api_keys.clear()
        await asyncio.gather(*(process.stop(grace_seconds) for process in processes))

    def log_tail(self, handle: ReplicaHandle, lines: int = DEFAULT_LOG_TAIL_LINES) -> list[str]:
        """The engine's last log lines."""
        path = handle.log_path or self.log_path(handle.attempt_id, handle.model_name)
        return tail_lines(path, lines)

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        """End a process of an earlier FICC run only if its pid and start time both match."""
        return await fence(process, grace_seconds)


def python_module_command(python: str, module: str, arguments: Sequence[str]) -> list[str]:
    """``python -I -u -m module arguments…`` with this interpreter, so the venv's packages are
    used: isolated (neither the working directory nor ``PYTHON*`` variables reach sys.path
    before the engine confines itself), unbuffered (log lines reach the file before a crash)."""
    return [python, "-I", "-u", "-m", module, *arguments]


def local_node_reasons(node: NodeInfo) -> list[str]:
    """Why an engine that runs as this FICC's child process cannot run on ``node``: it runs
    on this FICC's node only."""
    return [] if node.local else [f"node {node.node_id} is not this FICC's node"]
