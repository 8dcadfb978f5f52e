"""Managed inference services: commands, supervision, routing and admission.

:class:`InferenceServices` wires six collaborators, each owning its own state and use cases;
callers reach the one that owns theirs (``inference.commands.create_service``,
``inference.router.complete``, ``inference.admission.preview``), so that no method here
repeats a collaborator's signature:

- :class:`~.commands.ServiceCommands`: list, get, create, replace, control;
- :class:`~.upkeep.ServiceUpkeep`: what FICC does by itself: a grant's ending, its own restart;
- :class:`~.supervisor.ReplicaSupervisor`: engine replicas, background tasks, per-service locks;
- :class:`~.router.InvocationRouter`: endpoints, streamed and plain invocation, in-flight
  counts, the running services;
- :class:`~.admission.Admission`: spec checks, preview, prepare and the start's fit;
- :class:`~.invoke.Invocations`: one invocation of a service's OpenAI path, for local callers
  and peers alike (checks, routing, the answer's shape and size).

Only FICC's own lifecycle (recover, close) and what spans the collaborators stay here.
"""

from __future__ import annotations

from collections.abc import Mapping

from ficc.domain.inference import RuntimeName, UpstreamAllowList
from ficc.services.inference.admission import Admission
from ficc.services.inference.commands import ServiceCommands
from ficc.services.inference.invoke import Invocations
from ficc.services.inference.records import (
    ACTIVE_STATES,
    Actor,
    AttemptFence,
    Endpoint,
    ModelPath,
)
from ficc.services.inference.restarts import RestartCounter, Supervision
from ficc.services.inference.router import InvocationRouter
from ficc.services.inference.supervisor import ReplicaSupervisor
from ficc.services.inference.upkeep import ServiceUpkeep
from ficc.services.ports import Clock, EngineConnector, UnitOfWorkFactory
from ficc.services.ports.runtimes import Runtime

__all__ = [
    "ACTIVE_STATES",
    "Actor",
    "Admission",
    "AttemptFence",
    "Endpoint",
    "InferenceServices",
    "InvocationRouter",
    "Invocations",
    "ModelPath",
    "ReplicaSupervisor",
    "RestartCounter",
    "ServiceCommands",
    "ServiceUpkeep",
    "Supervision",
]


class InferenceServices:
    """Managed inference composed of its six collaborators, each a public attribute."""

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        runtimes: Mapping[RuntimeName, Runtime],
        model_path: ModelPath,
        fence_attempt: AttemptFence,
        engines: EngineConnector,
        supervision: Supervision,
        *,
        upstream_allow: UpstreamAllowList | None = None,
        stream_join_seconds: float = 0.0,
    ) -> None:
        self.engines = engines
        self.router = InvocationRouter(uow_factory, engines)
        self.invocations = Invocations(self.router, join_seconds=stream_join_seconds)
        self.supervisor = ReplicaSupervisor(
            uow_factory, clock, runtimes, self.router, fence_attempt, supervision
        )
        self.admission = Admission(
            uow_factory, self.supervisor, model_path, upstream_allow or UpstreamAllowList()
        )
        self.commands = ServiceCommands(
            uow_factory,
            clock,
            self.supervisor,
            self.router,
            self.admission,
            supervision.serve_instance,
        )
        self.upkeep = ServiceUpkeep(self.commands)

    # --- FICC's own lifecycle ----------------------------------------------------------------

    async def recover(self) -> None:
        """At start: replicas an earlier FICC process left that outlive it are adopted; every
        other attempt is fenced, then every service whose desired state is running starts
        again."""
        adopted = await self.upkeep.adopt()
        await self.supervisor.recover(adopted)
        await self.upkeep.restore()

    async def close(self) -> None:
        """At a clean shutdown: stop every engine and record the services as stopped; their
        desired state stays, so that the next start brings them back."""
        await self.supervisor.close()

    def tracked_services(self) -> frozenset[str]:
        """Service IDs held in memory by any collaborator; bounded by the services that exist."""
        return self.supervisor.tracked_services()
