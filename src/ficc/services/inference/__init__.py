"""Managed inference services: commands, supervision, routing and admission.

:class:`InferenceServices` is the one interface the web layer and the federation call; it
composes four collaborators, each owning its own state:

- :class:`~.commands.ServiceCommands`: create, replace, control, a grant's ending (DB only);
- :class:`~.supervisor.ReplicaSupervisor`: engine replicas, background tasks, per-service locks;
- :class:`~.router.InvocationRouter`: admitted requests, round robin, in-flight counts;
- :class:`~.admission.Admission`: spec checks, preview, prepare and the start's fit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from ficc.domain.grants import Grant
from ficc.domain.inference import RuntimeName, ServiceSpec, UpstreamAllowList
from ficc.domain.service_records import ServiceRecord
from ficc.services.inference.admission import Admission
from ficc.services.inference.commands import Outcome, ServiceCommands
from ficc.services.inference.records import (
    ACTIVE_STATES,
    START_TIMEOUT_SECONDS,
    STOP_GRACE_SECONDS,
    Actor,
    AttemptFence,
    Endpoint,
    ModelPath,
    service_json,
)
from ficc.services.inference.router import InvocationRouter
from ficc.services.inference.supervisor import ReplicaSupervisor
from ficc.services.mutations import MutationKey
from ficc.services.ports import Clock, EngineConnector, EngineEvent, UnitOfWork, UnitOfWorkFactory
from ficc.services.runtimes import Runtime

__all__ = [
    "ACTIVE_STATES",
    "Actor",
    "Admission",
    "AttemptFence",
    "Endpoint",
    "InferenceServices",
    "InvocationRouter",
    "ModelPath",
    "ReplicaSupervisor",
    "ServiceCommands",
    "service_json",
]


class InferenceServices:
    """The use cases of managed inference, composed of its four collaborators."""

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        runtimes: Mapping[RuntimeName, Runtime],
        model_path: ModelPath,
        fence_attempt: AttemptFence,
        engines: EngineConnector,
        serve_instance: str,
        *,
        start_timeout_seconds: float = START_TIMEOUT_SECONDS,
        stop_grace_seconds: float = STOP_GRACE_SECONDS,
        upstream_allow: UpstreamAllowList | None = None,
    ) -> None:
        self.engines = engines
        self.router = InvocationRouter(uow_factory, engines)
        self.supervisor = ReplicaSupervisor(
            uow_factory,
            clock,
            runtimes,
            self.router,
            fence_attempt,
            start_timeout_seconds=start_timeout_seconds,
            stop_grace_seconds=stop_grace_seconds,
        )
        self.admission = Admission(
            uow_factory, self.supervisor, model_path, upstream_allow or UpstreamAllowList()
        )
        self.commands = ServiceCommands(
            uow_factory, clock, self.supervisor, self.router, self.admission, serve_instance
        )

    # --- FICC's own lifecycle ----------------------------------------------------------------

    async def recover(self) -> None:
        """At start: nothing from an earlier FICC process is believed running."""
        await self.supervisor.recover()

    async def close(self) -> None:
        """At a clean shutdown: stop every engine and record the services as stopped."""
        await self.supervisor.close()

    def tracked_services(self) -> frozenset[str]:
        """Service IDs held in memory by any collaborator; bounded by the services that exist."""
        return self.supervisor.tracked_services()

    # --- commands ----------------------------------------------------------------------------

    async def list_services(self, project: str) -> list[dict[str, Any]]:
        return await self.commands.list_services(project)

    async def get_service(self, project: str, service_id: str) -> dict[str, Any]:
        return await self.commands.get_service(project, service_id)

    async def create_service(
        self,
        actor: Actor,
        project: str,
        spec_data: object,
        *,
        key: MutationKey | None = None,
        check: Callable[[UnitOfWork, ServiceSpec], Awaitable[None]] | None = None,
    ) -> Outcome:
        return await self.commands.create_service(actor, project, spec_data, key=key, check=check)

    async def replace_service(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        *,
        revision: object,
        spec_data: object,
        key: MutationKey | None = None,
    ) -> Outcome:
        return await self.commands.replace_service(
            actor, project, service_id, revision=revision, spec_data=spec_data, key=key
        )

    async def control_service(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        *,
        revision: object,
        operation: object,
        acknowledge_unknown: object = False,
        key: MutationKey | None = None,
    ) -> Outcome:
        return await self.commands.control_service(
            actor,
            project,
            service_id,
            revision=revision,
            operation=operation,
            acknowledge_unknown=acknowledge_unknown,
            key=key,
        )

    async def stop_for_grant(self, grant: Grant) -> None:
        await self.commands.stop_for_grant(grant)

    # --- admission ---------------------------------------------------------------------------

    async def preview(self, project: str, spec_data: object) -> dict[str, Any]:
        return await self.admission.preview(project, spec_data)

    async def prepare(
        self,
        project: str,
        *,
        model_ids: frozenset[str] | None = None,
        node_ids: frozenset[str] | None = None,
    ) -> dict[str, Any]:
        return await self.admission.prepare(project, model_ids=model_ids, node_ids=node_ids)

    # --- invocation --------------------------------------------------------------------------

    async def endpoint(self, project: str, service_id: str) -> Endpoint:
        return await self.router.endpoint(project, service_id)

    def in_flight(self, service_id: str) -> AbstractAsyncContextManager[None]:
        return self.router.in_flight(service_id)

    def stream(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        *,
        endpoint: Endpoint | None = None,
    ) -> AbstractAsyncContextManager[AsyncIterator[EngineEvent]]:
        return self.router.stream(project, service_id, path, body, endpoint=endpoint)

    async def complete(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        *,
        endpoint: Endpoint | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        return await self.router.complete(
            project, service_id, path, body, endpoint=endpoint, max_bytes=max_bytes
        )

    async def running_services(self, project: str) -> list[ServiceRecord]:
        return await self.router.running_services(project)
