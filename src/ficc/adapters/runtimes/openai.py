"""The ``openai`` runtime: an OpenAI-compatible server that runs without FICC.

Nothing is launched: start and stop only mark the replica in use or not; health is a real
``GET /v1/models`` against ``options.base_url``.
"""

from __future__ import annotations

import asyncio
from typing import Final

from ficc.adapters.engines.client import EngineClient, EngineTimeout
from ficc.adapters.engines.pool import EngineClients
from ficc.base.errors import FiccError, InvalidInput
from ficc.domain.inference import RuntimeName, ServiceSpec, UpstreamAllowList, parse_base_url
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

HEALTH_TIMEOUT: Final = EngineTimeout.each(5.0)
READY_POLL_SECONDS: Final = 0.5


class OpenAIRuntime:
    """Fronts an existing server; its process, if any, is someone else's to run."""

    def __init__(
        self,
        *,
        upstream_allow: UpstreamAllowList | None = None,
        engines: EngineClients | None = None,
    ) -> None:
        self._upstream_allow = upstream_allow or UpstreamAllowList()
        self._engines = engines
        self._stopped: dict[str, asyncio.Event] = {}

    @property
    def name(self) -> RuntimeName:
        """``openai``."""
        return RuntimeName.OPENAI

    async def availability(self, node: NodeInfo) -> Availability:
        """Always available: the server is reached over the network, from any node."""
        return Availability()

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        """Record the replica; the server is expected to run already (see ``wait_ready``)."""
        if "base_url" not in request.options:
            raise InvalidInput("options.base_url is required for runtime openai", field="options")
        base_url = parse_base_url("options.base_url", request.options["base_url"])
        # Checked again here, not only at create and start: no launch reaches a URL the owner
        # did not allow, whatever path led to it.
        spec = ServiceSpec("x", request.model_name, self.name, None, 1, {"base_url": base_url})
        self._upstream_allow.check(spec)
        self._stopped[request.attempt_id] = asyncio.Event()
        return ReplicaHandle(
            attempt_id=request.attempt_id,
            runtime=self.name,
            base_url=base_url,
            model_name=request.model_name,
        )

    async def health(self, handle: ReplicaHandle) -> Health:
        """Whether the server answers ``GET /v1/models`` with a model list."""
        async with EngineClient(handle.base_url, timeout=HEALTH_TIMEOUT) as client:
            try:
                listing = await client.list_models()
            except FiccError as exc:
                return Health(HealthState.UNHEALTHY, reason=exc.message)
        if not isinstance(listing.get("data"), list):
            return Health(HealthState.UNHEALTHY, reason="the server's model list has no data")
        return Health(HealthState.HEALTHY)

    async def wait_ready(self, handle: ReplicaHandle, timeout_seconds: float) -> Health:
        """Poll the health check until it passes or ``timeout_seconds`` pass."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            health = await self.health(handle)
            if health.healthy or loop.time() + READY_POLL_SECONDS >= deadline:
                return health
            await asyncio.sleep(READY_POLL_SECONDS)

    async def wait_exited(self, handle: ReplicaHandle) -> ReplicaExit:
        """Returns only once the replica is stopped: an outage shows in health, not here."""
        await self._stopped.setdefault(handle.attempt_id, asyncio.Event()).wait()
        return ReplicaExit(crashed=False, exit_code=None, signal=None)

    async def stop(self, handle: ReplicaHandle, grace_seconds: float) -> ReplicaExit:
        """Mark the replica stopped; the server keeps running, FICC's clients to it close."""
        self._stopped.setdefault(handle.attempt_id, asyncio.Event()).set()
        if self._engines is not None:
            await self._engines.forget(handle.base_url)
        return ReplicaExit(crashed=False, exit_code=None, signal=None)

    def log_tail(self, handle: ReplicaHandle, lines: int = DEFAULT_LOG_TAIL_LINES) -> list[str]:
        """No log: FICC does not run the server."""
        return []

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        """There is never a process of FICC's to fence."""
        return FenceResult.ABSENT
