"""What the runtimes that launch a local engine process share: readiness, health, stop, fence.

A subclass says only how to build the command line and whether the node can run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import httpx

from ficc.adapters.engine_client import EngineClient
from ficc.adapters.runtimes.processes import (
    EngineProcess,
    engine_environment,
    fence,
    free_loopback_port,
    tail_lines,
)
from ficc.base.errors import Conflict, FiccError, InvalidInput, NotFound
from ficc.base.ids import parse_id
from ficc.domain.inference import RuntimeName
from ficc.services.runtimes import (
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

HEALTH_TIMEOUT: Final = httpx.Timeout(2.0)
READY_POLL_SECONDS: Final = 0.1
"""The engine offers no readiness event; between two polls a crash still ends the wait at once."""


class SupervisedRuntime(ABC):
    """A runtime whose replicas are child processes of FICC serving HTTP on a loopback port."""

    def __init__(self, *, log_dir: Path, python: str = sys.executable) -> None:
        self._log_dir = log_dir
        self._python = python
        self._processes: dict[str, EngineProcess] = {}

    @property
    @abstractmethod
    def name(self) -> RuntimeName:
        """The runtime this adapter implements."""

    @abstractmethod
    async def availability(self, node: NodeInfo) -> Availability:
        """Why this runtime cannot run on ``node`` now."""

    @abstractmethod
    def command(self, request: LaunchRequest, port: int) -> list[str]:
        """The engine's command line for ``request`` listening on 127.0.0.1:``port``."""

    def log_path(self, attempt_id: str) -> Path:
        """Where the engine of an attempt writes its output."""
        return self._log_dir / f"{attempt_id}.log"

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        """Start the engine; Conflict naming the reasons when this node cannot run it."""
        availability = await self.availability(request.node)
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
        port = free_loopback_port()
        log_path = self.log_path(request.attempt_id)
        process = await EngineProcess.spawn(
            self.command(request, port),
            log_path=log_path,
            env=engine_environment({"FICC_ATTEMPT": request.attempt_id}),
        )
        self._processes[request.attempt_id] = process
        return ReplicaHandle(
            attempt_id=request.attempt_id,
            runtime=self.name,
            base_url=f"http://127.0.0.1:{port}",
            model_name=request.model_name,
            process=process.identity,
            port=port,
            log_path=log_path,
        )

    def _process(self, handle: ReplicaHandle) -> EngineProcess | None:
        return self._processes.get(handle.attempt_id)

    async def _probe(self, handle: ReplicaHandle) -> Health:
        async with EngineClient(handle.base_url, timeout=HEALTH_TIMEOUT) as client:
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
        return ended

    async def stop_all(self, grace_seconds: float) -> None:
        """Stop every engine this runtime launched, together (FICC's shutdown)."""
        processes = list(self._processes.values())
        self._processes.clear()
        await asyncio.gather(*(process.stop(grace_seconds) for process in processes))

    def log_tail(self, handle: ReplicaHandle, lines: int = DEFAULT_LOG_TAIL_LINES) -> list[str]:
        """The engine's last log lines."""
        return tail_lines(handle.log_path or self.log_path(handle.attempt_id), lines)

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        """End a process of an earlier FICC run only if its pid and start time both match."""
        return await fence(process, grace_seconds)


def python_module_command(python: str, module: str, arguments: Sequence[str]) -> list[str]:
    """``python -m module arguments…`` with this interpreter, so the venv's packages are used."""
    return [python, "-m", module, *arguments]
