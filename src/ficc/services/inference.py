"""Managed inference services: specs, lifecycle, supervision, admission and invocation.

Every replica attempt is recorded before its engine is launched (write-ahead). After a FICC
restart, an attempt with a recorded process is fenced (killed by pid and start time) and one
without is *unknown*: a start then needs ``acknowledge_unknown``, which first kills whatever
such an attempt may have left running (found by the attempt ID in its environment).

``revision`` grows with every user change (create, replace, control); engine events (ready,
crashed, drained) change ``state`` but not ``revision``, so a caller's revision stays valid
while a service comes up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ficc.base.errors import (
    Conflict,
    FiccError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    RevisionMismatch,
    Unavailable,
)
from ficc.base.ids import new_id
from ficc.base.times import format_time
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.grants import Grant
from ficc.domain.inference import (
    AttemptEvent,
    AttemptState,
    Capacity,
    Operation,
    Requirements,
    RuntimeName,
    ServiceEvent,
    ServiceSpec,
    ServiceState,
    UpstreamAllowList,
    admits_requests,
    apply_event,
    check_context,
    check_start,
    fit,
    grant_running_shortfall,
    next_attempt_state,
    parse_operation,
    parse_service_spec,
    plan_operation,
    recovery_event,
    requirements,
    uses_local_model,
)
from ficc.domain.mutations import derived_entropy
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services import audit, mutations
from ficc.services.mutations import MutationKey
from ficc.services.ports import (
    Clock,
    EngineConnector,
    EngineEvent,
    UnitOfWork,
    UnitOfWorkFactory,
)
from ficc.services.runtimes import (
    LaunchRequest,
    NodeInfo,
    ProcessIdentity,
    ReplicaHandle,
    Runtime,
)

log = logging.getLogger("ficc.inference")

START_TIMEOUT_SECONDS: Final = 120.0
STOP_GRACE_SECONDS: Final = 5.0

ACTIVE_STATES: Final = frozenset(
    {ServiceState.STARTING, ServiceState.RUNNING, ServiceState.DRAINING}
)
"""States in which a service's replicas hold (or are taking) their node's resources."""

ModelPath = Callable[[CatalogueModel], Path]
AttemptFence = Callable[[str, float], Awaitable[int]]
"""Kill every process tagged with an attempt ID; returns how many were killed."""


@dataclass(frozen=True)
class Endpoint:
    """Where a running service answers, and the name its engine knows it by."""

    service_id: str
    base_url: str
    model_name: str
    runtime: RuntimeName


@dataclass(frozen=True)
class _Admission:
    """A service this process saw become ready, and the replicas it became ready with."""

    project: str
    runtime: RuntimeName
    handles: list[ReplicaHandle]


@dataclass(frozen=True)
class Actor:
    """Who changes a service: an audit name, and the grant when a peer acts."""

    name: str
    grant_id: str | None = None
    peer_hypernet_id: str | None = None
    peer_cluster_key: str | None = None


class InferenceServices:
    """The use cases of managed inference, and the supervisor of their engine replicas."""

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
        self._uow_factory = uow_factory
        self._clock = clock
        self._runtimes = runtimes
        self._model_path = model_path
        self._fence_attempt = fence_attempt
        self.engines = engines
        self._serve_instance = serve_instance
        self._start_timeout = start_timeout_seconds
        self._grace = stop_grace_seconds
        self._upstream_allow = upstream_allow or UpstreamAllowList()
        self._handles: dict[str, list[ReplicaHandle]] = {}
        self._stopping: set[str] = set()
        self._in_flight: dict[str, int] = {}
        self._idle: dict[str, asyncio.Event] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_replica: dict[str, int] = {}
        self._admitting: dict[str, _Admission] = {}
        self._admission = asyncio.Lock()

    # --- lifecycle of FICC itself ----------------------------------------------------------

    async def recover(self) -> None:
        """At start: nothing from an earlier FICC process is believed running."""
        async with self._uow_factory() as uow:
            for service in await uow.services.list_all():
                lost = 0
                for attempt in await uow.attempts.for_service(service.id):
                    event = recovery_event(attempt.state)
                    if event is None:
                        continue
                    if event is AttemptEvent.RECOVERED and attempt.pid is not None:
                        await self._runtime(service.spec.runtime).fence(
                            ProcessIdentity(attempt.pid, attempt.pid_start_ticks or -1),
                            self._grace,
                        )
                    if event is AttemptEvent.LOST:
                        lost += 1
                    await uow.attempts.update(
                        replace(
                            attempt,
                            state=next_attempt_state(attempt.state, event),
                            ended_at=self._clock(),
                        )
                    )
                if service.state in (
                    ServiceState.STARTING,
                    ServiceState.RUNNING,
                    ServiceState.DRAINING,
                ):
                    reason = f"FICC restarted while the service was {service.state.value}"
                    reason += "; its replicas were stopped"
                    if lost:
                        reason += f"; {lost} replica attempt(s) have an unknown outcome"
                    await uow.services.update(
                        replace(
                            service,
                            state=ServiceState.FAILED,
                            error=reason,
                            updated_at=self._clock(),
                        )
                    )
            await uow.commit()

    async def close(self) -> None:
        """At a clean shutdown: stop every engine and record the services as stopped."""
        self._admitting.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for service_id in list(self._handles):
            await self._stop_replicas(service_id)
            async with self._uow_factory() as uow:
                service = await uow.services.get(service_id)
                if service is not None and service.state is not ServiceState.STOPPED:
                    await uow.services.update(
                        replace(service, state=ServiceState.STOPPED, updated_at=self._clock())
                    )
                await uow.commit()

    # --- reading ---------------------------------------------------------------------------

    async def list_services(self, project: str) -> list[dict[str, Any]]:
        async with self._uow_factory() as uow:
            services = await uow.services.list(project)
            return [await self._view(uow, service) for service in services]

    async def get_service(self, project: str, service_id: str) -> dict[str, Any]:
        async with self._uow_factory() as uow:
            service = await self._load(uow, project, service_id)
            return await self._view(uow, service)

    async def _load(self, uow: UnitOfWork, project: str, service_id: str) -> ServiceRecord:
        service = await uow.services.get(service_id)
        if service is None or service.project != project:
            raise NotFound(
                f"no service {service_id} in project {project}", details={"service": service_id}
            )
        return service

    async def _view(self, uow: UnitOfWork, service: ServiceRecord) -> dict[str, Any]:
        attempts = await uow.attempts.for_service(service.id)
        return service_json(service, attempts)

    # --- changing ----------------------------------------------------------------------------

    async def create_service(
        self,
        actor: Actor,
        project: str,
        spec_data: object,
        *,
        key: MutationKey | None = None,
        check: Callable[[UnitOfWork, ServiceSpec], Awaitable[None]] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """A new service in state ``stopped``; returns (service, replayed)."""
        spec = parse_service_spec(spec_data)
        async with self._uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            node = await self._check_spec(uow, project, spec)
            if check is not None:
                await check(uow, spec)
            entropy = (
                derived_entropy(key.scope, key.mutation_id, "service")
                if key is not None
                else secrets.token_bytes(16)
            )
            now = self._clock()
            service = ServiceRecord(
                id=new_id("service", entropy),
                project=project,
                spec=spec,
                node=node.id,
                state=ServiceState.STOPPED,
                revision=1,
                error=None,
                created_by_grant=actor.grant_id,
                created_at=now,
                updated_at=now,
            )
            if await uow.services.get(service.id) is not None:
                # An earlier try of this very mutation created it; its receipt was not kept.
                existing = await uow.services.get(service.id)
                assert existing is not None
                result = await self._view(uow, existing)
            else:
                await uow.services.add(service)
                result = await self._view(uow, service)
                await self._audit(uow, actor, project, "service.created", service.id)
            if key is not None:
                await mutations.record(uow, self._clock, key, state="completed", result=result)
            await uow.commit()
        return result, False

    async def replace_service(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        *,
        revision: object,
        spec_data: object,
        key: MutationKey | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """A new spec for a stopped service."""
        spec = parse_service_spec(spec_data)
        expected = _parse_revision(revision)
        async with self._uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await self._load(uow, project, service_id)
            _check_revision(service, expected)
            plan_operation(service.state, Operation.REPLACE)
            node = await self._check_spec(uow, project, spec)
            updated = replace(
                service,
                spec=spec,
                node=node.id,
                revision=service.revision + 1,
                error=None,
                updated_at=self._clock(),
            )
            await uow.services.update(updated)
            await self._audit(uow, actor, project, "service.replaced", service_id)
            result = await self._view(uow, updated)
            if key is not None:
                await mutations.record(uow, self._clock, key, state="completed", result=result)
            await uow.commit()
        return result, False

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
    ) -> tuple[dict[str, Any], bool]:
        """start, drain, stop or remove, checked against the current revision."""
        op = parse_operation(operation)
        if not isinstance(acknowledge_unknown, bool):
            raise InvalidInput(
                "acknowledge_unknown must be a JSON boolean (true or false)",
                field="acknowledge_unknown",
            )
        if acknowledge_unknown and op is not Operation.START:
            raise InvalidInput(
                "acknowledge_unknown is accepted only for start", field="acknowledge_unknown"
            )
        expected = _parse_revision(revision)
        lock = await self._lock_of(service_id)
        if lock is None:
            raise NotFound(
                f"no service {service_id} in project {project}", details={"service": service_id}
            )
        async with lock:
            if op is Operation.START:
                return await self._start(
                    actor, project, service_id, expected, acknowledge_unknown, key
                )
            if op is Operation.STOP:
                return await self._stop(actor, project, service_id, expected, key)
            if op is Operation.DRAIN:
                return await self._drain(actor, project, service_id, expected, key)
            return await self._remove(actor, project, service_id, expected, key)

    async def _lock_of(self, service_id: str) -> asyncio.Lock | None:
        """The lock that orders changes of one service; None when there is no such service.

        Made only for a service that exists (any string a caller sends would otherwise grow the
        map), and dropped when the service is removed.
        """
        lock = self._locks.get(service_id)
        if lock is not None:
            return lock
        async with self._uow_factory() as uow:
            if await uow.services.get(service_id) is None:
                return None
        return self._locks.setdefault(service_id, asyncio.Lock())

    async def _start(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        expected: int,
        acknowledge: bool,
        key: MutationKey | None,
    ) -> tuple[dict[str, Any], bool]:
        async with self._uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await self._load(uow, project, service_id)
            _check_revision(service, expected)
            attempts = await uow.attempts.for_service(service_id)
            check_start(service.state, [a.state for a in attempts], acknowledge_unknown=acknowledge)
            node = await self._node(uow, service.node)
            model_path = await self._model_file(uow, project, service.spec)
            await self._check_runtime(service.spec, node)
            if model_path is not None:
                model = await uow.models.get(service.spec.model)
                assert model is not None
                check_context(service.spec, model.manifest.get("metadata", {}))
        if acknowledge:
            # Release every earlier attempt before a new one starts.
            for attempt in attempts:
                if attempt.state is AttemptState.UNKNOWN:
                    await self._fence_attempt(attempt.id, self._grace)
        # One start at a time passes admission and commits its state, so two starts cannot
        # both count the same free memory.
        async with self._admission, self._uow_factory() as uow:
            service = await self._load(uow, project, service_id)
            _check_revision(service, expected)
            await self._admit(uow, service, node)
            now = self._clock()
            for attempt in await uow.attempts.for_service(service_id):
                if attempt.state is AttemptState.UNKNOWN and acknowledge:
                    await uow.attempts.update(
                        replace(
                            attempt,
                            state=next_attempt_state(attempt.state, AttemptEvent.ACKNOWLEDGE),
                        )
                    )
            new_attempts = [
                AttemptRecord(
                    id=new_id("attempt", secrets.token_bytes(16)),
                    service_id=service_id,
                    replica=index,
                    state=AttemptState.PENDING,
                    serve_instance=self._serve_instance,
                    created_at=now,
                )
                for index in range(service.spec.replicas)
            ]
            for attempt in new_attempts:
                await uow.attempts.add(attempt)
            started = replace(
                service,
                state=ServiceState.STARTING,
                revision=service.revision + 1,
                error=None,
                updated_at=now,
            )
            await uow.services.update(started)
            await self._audit(
                uow,
                actor,
                project,
                "service.start",
                service_id,
                {"acknowledge_unknown": acknowledge},
            )
            result = await self._view(uow, started)
            if key is not None:
                await mutations.record(uow, self._clock, key, state="completed", result=result)
            await uow.commit()
        self._spawn(self._launch(started, node, model_path, new_attempts))
        return result, False

    async def _admit(self, uow: UnitOfWork, service: ServiceRecord, node: Node) -> None:
        """Refuse a start that does not fit its node, or passes its grant's running caps."""
        active = [
            other
            for other in await uow.services.list_all()
            if other.id != service.id and other.state in ACTIVE_STATES
        ]
        if service.created_by_grant is not None:
            of_grant = [o.spec for o in active if o.created_by_grant == service.created_by_grant]
            over = grant_running_shortfall(of_grant, service.spec)
            if over is not None:
                raise LimitExceeded(
                    over.reason,
                    details={"limit": over.resource, "allowed": over.available},
                )
        need = await self._requirements(uow, service.spec)
        committed = Requirements()
        for other in active:
            if other.node == node.id:
                committed += await self._requirements(uow, other.spec)
        shortfalls, _ = fit(need, committed, _capacity(node))
        if shortfalls:
            raise Conflict(
                f"service {service.id} does not fit on node {node.id}: "
                + "; ".join(shortfall.reason for shortfall in shortfalls),
                details={
                    "resources": [
                        {
                            "resource": shortfall.resource,
                            "needed": shortfall.needed,
                            "available": shortfall.available,
                        }
                        for shortfall in shortfalls
                    ]
                },
            )

    @staticmethod
    async def _requirements(uow: UnitOfWork, spec: ServiceSpec) -> Requirements:
        model = await uow.models.get(spec.model) if uses_local_model(spec.runtime) else None
        return requirements(spec, 0 if model is None else model.total_bytes())

    async def _transition(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        expected: int,
        key: MutationKey | None,
        operation: Operation,
        state: ServiceState,
    ) -> tuple[dict[str, Any], bool]:
        """Change a service's state; the receipt commits with the change, in one transaction."""
        async with self._uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await self._load(uow, project, service_id)
            _check_revision(service, expected)
            plan_operation(service.state, operation)
            self._admitting.pop(service_id, None)  # no new request from now on
            changed = replace(
                service, state=state, revision=service.revision + 1, updated_at=self._clock()
            )
            await uow.services.update(changed)
            await self._audit(uow, actor, project, f"service.{operation.value}", service_id)
            result = await self._view(uow, changed)
            if key is not None:
                await mutations.record(uow, self._clock, key, state="completed", result=result)
            await uow.commit()
        return result, False

    async def _stop(
        self, actor: Actor, project: str, service_id: str, expected: int, key: MutationKey | None
    ) -> tuple[dict[str, Any], bool]:
        result, replayed = await self._transition(
            actor, project, service_id, expected, key, Operation.STOP, ServiceState.STOPPED
        )
        if not replayed:
            await self._stop_replicas(service_id)
            result = await self.get_service(project, service_id)
        return result, replayed

    async def _drain(
        self, actor: Actor, project: str, service_id: str, expected: int, key: MutationKey | None
    ) -> tuple[dict[str, Any], bool]:
        result, replayed = await self._transition(
            actor, project, service_id, expected, key, Operation.DRAIN, ServiceState.DRAINING
        )
        if not replayed:
            self._spawn(self._finish_drain(service_id))
        return result, replayed

    async def _remove(
        self, actor: Actor, project: str, service_id: str, expected: int, key: MutationKey | None
    ) -> tuple[dict[str, Any], bool]:
        async with self._uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await self._load(uow, project, service_id)
            _check_revision(service, expected)
            plan_operation(service.state, Operation.REMOVE)
            await uow.attempts.delete_for_service(service_id)
            await uow.services.delete(service_id)
            await self._audit(uow, actor, project, "service.removed", service_id)
            result = {"id": service_id, "removed": True}
            if key is not None:
                await mutations.record(uow, self._clock, key, state="completed", result=result)
            await uow.commit()
        # The caller holds this lock; anyone waiting on it finds the service gone.
        self._locks.pop(service_id, None)
        self._next_replica.pop(service_id, None)
        return result, False

    async def stop_for_grant(self, grant: Grant) -> None:
        """With ``stop_on_revoke``, an ended grant's services are stopped."""
        if not grant.terms.stop_on_revoke:
            return
        for service_id in sorted(grant.created_services):
            lock = await self._lock_of(service_id)
            if lock is None:
                continue
            async with lock:
                async with self._uow_factory() as uow:
                    service = await uow.services.get(service_id)
                    if service is None or service.state is ServiceState.STOPPED:
                        continue
                    await uow.services.update(
                        replace(
                            service,
                            state=ServiceState.STOPPED,
                            revision=service.revision + 1,
                            updated_at=self._clock(),
                        )
                    )
                    await audit.record(
                        uow,
                        self._clock,
                        action="service.stop",
                        actor="stop_on_revoke",
                        project=service.project,
                        target=service_id,
                        details={"grant": grant.id},
                    )
                    await uow.commit()
                await self._stop_replicas(service_id)

    # --- admission ---------------------------------------------------------------------------

    async def preview(self, project: str, spec_data: object) -> dict[str, Any]:
        """Would this spec fit on its node now? Reasons, not a launch; ``start`` enforces it."""
        spec = parse_service_spec(spec_data)
        reasons: list[str] = []
        warnings: list[str] = []
        async with self._uow_factory() as uow:
            node = await self._find_node(uow, spec.node)
            model: CatalogueModel | None = None
            present = True
            if uses_local_model(spec.runtime):
                model = await uow.models.get(spec.model)
                if model is None or model.project != project:
                    # Another project's model is not measured: its size is not this project's.
                    model = None
                    reasons.append(f"model {spec.model} is not in the catalogue of {project}")
                else:
                    present = await self._present(uow, model)
                    try:
                        check_context(spec, model.manifest.get("metadata", {}))
                    except InvalidInput as exc:
                        reasons.append(exc.message)
            if node is None:
                reasons.append(f"node {spec.node} is not a node of this cluster")
                return _preview_json(spec, None, reasons, warnings, {})
            committed = Requirements()
            for other in await uow.services.list_all():
                if other.node == node.id and other.state in ACTIVE_STATES:
                    committed += await self._requirements(uow, other.spec)
        availability = await self._runtime(spec.runtime).availability(_node_info(node))
        reasons.extend(availability.reasons)
        if model is not None and not present:
            reasons.append(f"model {model.id} has files missing from the blob store")
        need = requirements(spec, 0 if model is None else model.total_bytes())
        shortfalls, fit_warnings = fit(need, committed, _capacity(node))
        reasons.extend(shortfall.reason for shortfall in shortfalls)
        warnings.extend(fit_warnings)
        return _preview_json(spec, node, reasons, warnings, need.to_json())

    async def prepare(
        self,
        project: str,
        *,
        model_ids: frozenset[str] | None = None,
        node_ids: frozenset[str] | None = None,
    ) -> dict[str, Any]:
        """Models (names, revisions, readiness) and the node/runtime offers that can run them."""
        async with self._uow_factory() as uow:
            models = [
                m for m in await uow.models.list(project) if model_ids is None or m.id in model_ids
            ]
            ready = {model.id: await self._present(uow, model) for model in models}
            nodes = [n for n in await uow.nodes.list() if node_ids is None or n.id in node_ids]
        offers = []
        for node in nodes:
            for runtime in self._runtimes.values():
                availability = await runtime.availability(_node_info(node))
                offers.append(
                    {
                        "node": node.id,
                        "runtime": runtime.name.value,
                        "available": availability.available,
                        "reasons": list(availability.reasons),
                    }
                )
        return {
            "models": [
                {
                    "id": model.id,
                    "name": model.name,
                    "revision": model.sha256,
                    "format": model.format,
                    "ready": ready[model.id],
                }
                for model in models
            ],
            "offers": offers,
        }

    # --- invocation --------------------------------------------------------------------------

    async def endpoint(self, project: str, service_id: str) -> Endpoint:
        """Where a running service of ``project`` answers; refused unless it is running.

        Read on every inference request. While the replicas that this process saw become
        ready are still the service's replicas (no stop, crash, drain or new start since), the
        answer comes from memory; otherwise from the database, as the authority.
        """
        handles = self._handles.get(service_id)
        admission = self._admitting.get(service_id)
        if (
            admission is not None
            and admission.project == project
            and admission.handles is handles
            and handles
        ):
            runtime = admission.runtime
        else:
            async with self._uow_factory() as uow:
                service = await self._load(uow, project, service_id)
            handles = self._handles.get(service_id)
            if not admits_requests(service.state) or not handles:
                raise Conflict(
                    f"service {service_id} is {service.state.value}; only a running service "
                    "takes requests",
                    details={"state": service.state.value},
                )
            runtime = service.spec.runtime
        replica = self._next_replica.get(service_id, 0) % len(handles)
        self._next_replica[service_id] = replica + 1
        handle = handles[replica]
        return Endpoint(service_id, handle.base_url, handle.model_name, runtime)

    @contextlib.asynccontextmanager
    async def in_flight(self, service_id: str) -> AsyncIterator[None]:
        """Count a request in flight, so a drain waits for it."""
        self._in_flight[service_id] = self._in_flight.get(service_id, 0) + 1
        self._idle.setdefault(service_id, asyncio.Event()).clear()
        try:
            yield
        finally:
            self._in_flight[service_id] -= 1
            if self._in_flight[service_id] == 0:
                self._idle[service_id].set()

    @contextlib.asynccontextmanager
    async def stream(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        *,
        endpoint: Endpoint | None = None,
    ) -> AsyncIterator[AsyncIterator[EngineEvent]]:
        """Open a streamed invocation; leaving the block closes it, which stops the engine.

        ``endpoint``: the replica from :meth:`endpoint` when the caller asked for it already
        (asking twice would also advance the round robin twice).
        """
        if endpoint is None:
            endpoint = await self.endpoint(project, service_id)
        async with self.in_flight(service_id):
            stream = await self.engines.open_stream(
                endpoint.base_url, endpoint.model_name, path, body
            )
            try:
                yield aiter(stream)
            finally:
                await stream.aclose()

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
        """A plain answer, generated in streaming mode so that cancelling this call stops it.

        ``max_bytes``: refused (LimitExceeded) as soon as the answer arriving would pass it.
        """
        if endpoint is None:
            endpoint = await self.endpoint(project, service_id)
        async with self.in_flight(service_id):
            return await self.engines.complete(
                endpoint.base_url, endpoint.model_name, path, body, max_bytes=max_bytes
            )

    async def running_services(self, project: str) -> list[ServiceRecord]:
        async with self._uow_factory() as uow:
            services = await uow.services.list(project)
        return [s for s in services if admits_requests(s.state) and self._handles.get(s.id)]

    # --- supervision ------------------------------------------------------------------------

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:  # the outermost handler of a background task
                log.exception("background inference work failed")

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _launch(
        self,
        service: ServiceRecord,
        node: Node,
        model_path: Path | None,
        attempts: list[AttemptRecord],
    ) -> None:
        runtime = self._runtime(service.spec.runtime)
        handles: list[ReplicaHandle] = []
        self._handles[service.id] = handles
        self._stopping.discard(service.id)

        def superseded() -> bool:
            """A stop, a crash or a newer start has taken this launch's replicas away."""
            return self._handles.get(service.id) is not handles

        for index, attempt in enumerate(attempts):
            if superseded():
                await self._never_launched(attempts[index:])
                return
            request = LaunchRequest(
                attempt_id=attempt.id,
                node=_node_info(node),
                model_name=service.id,
                options=dict(service.spec.options),
                model_path=model_path,
            )
            try:
                handle = await runtime.launch(request)
            except FiccError as exc:
                await self._attempt_event(attempt.id, AttemptEvent.LAUNCH_FAILED)
                await self._never_launched(attempts[index + 1 :])
                if not superseded():
                    await self._service_event(service.id, ServiceEvent.LAUNCH_FAILED, exc.message)
                    await self._stop_replicas(service.id)
                return
            await self._attempt_launched(attempt.id, handle)
            if superseded():
                # Stopped while this engine was being launched: end it here, or nobody will.
                await self._end_replica(handle)
                await self._never_launched(attempts[index + 1 :])
                return
            handles.append(handle)
            self._spawn(self._watch(service.id, runtime, handle))
        for handle in list(handles):
            health = await runtime.wait_ready(handle, self._start_timeout)
            if superseded():
                return
            if not health.healthy:
                tail = "\n".join(runtime.log_tail(handle))
                await self._attempt_event(handle.attempt_id, AttemptEvent.LAUNCH_FAILED, tail)
                await self._service_event(
                    service.id, ServiceEvent.LAUNCH_FAILED, health.reason or "engine not ready"
                )
                await self._stop_replicas(service.id)
                return
            await self._attempt_event(handle.attempt_id, AttemptEvent.HEALTHY)
        if not superseded():
            ready = await self._service_event(service.id, ServiceEvent.READY, None)
            if ready is ServiceState.RUNNING:
                self._admitting[service.id] = _Admission(
                    service.project, service.spec.runtime, handles
                )

    async def _never_launched(self, attempts: list[AttemptRecord]) -> None:
        """Attempts a launch gave up before starting them: provably no process, not pending.

        Left pending, they would read as "unknown outcome" after a FICC restart.
        """
        for attempt in attempts:
            await self._attempt_event(attempt.id, AttemptEvent.LAUNCH_FAILED)

    async def _watch(self, service_id: str, runtime: Runtime, handle: ReplicaHandle) -> None:
        ended = await runtime.wait_exited(handle)
        if service_id in self._stopping or handle not in self._handles.get(service_id, []):
            return
        self._admitting.pop(service_id, None)
        tail = "\n".join(ended.log_tail or runtime.log_tail(handle))
        await self._attempt_event(handle.attempt_id, AttemptEvent.CRASHED, tail, ended.exit_code)
        await self._service_event(service_id, ServiceEvent.CRASHED, ended.describe())
        await self._stop_replicas(service_id)

    async def _finish_drain(self, service_id: str) -> None:
        handles = self._handles.get(service_id)
        idle = self._idle.setdefault(service_id, asyncio.Event())
        if self._in_flight.get(service_id, 0) == 0:
            idle.set()
        await idle.wait()
        if handles is not None and self._handles.get(service_id) is not handles:
            return  # stopped, crashed or started again meanwhile: not this drain's replicas
        await self._stop_replicas(service_id)
        await self._service_event(service_id, ServiceEvent.DRAINED, None)

    async def _stop_replicas(self, service_id: str) -> None:
        # Marked even when no replica is known yet: a launch in progress sees it is superseded
        # and ends the engine it is starting itself.
        self._stopping.add(service_id)
        handles = list(self._handles.pop(service_id, []))
        for handle in handles:
            await self._end_replica(handle)

    async def _end_replica(self, handle: ReplicaHandle) -> None:
        runtime = self._runtime(handle.runtime)
        await self._attempt_event(handle.attempt_id, AttemptEvent.STOP)
        ended = await runtime.stop(handle, self._grace)
        await self._attempt_event(handle.attempt_id, AttemptEvent.EXITED, None, ended.exit_code)

    async def _attempt_launched(self, attempt_id: str, handle: ReplicaHandle) -> None:
        async with self._uow_factory() as uow:
            attempt = await uow.attempts.get(attempt_id)
            if attempt is None:
                return
            await uow.attempts.update(
                replace(
                    attempt,
                    state=next_attempt_state(attempt.state, AttemptEvent.LAUNCHED),
                    pid=handle.pid,
                    pid_start_ticks=None if handle.process is None else handle.process.start_ticks,
                    port=handle.port,
                )
            )
            await uow.commit()

    async def _attempt_event(
        self,
        attempt_id: str,
        event: AttemptEvent,
        log_tail: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        async with self._uow_factory() as uow:
            attempt = await uow.attempts.get(attempt_id)
            if attempt is None:
                return
            try:
                state = next_attempt_state(attempt.state, event)
            except Conflict:
                return  # a stale event: the attempt moved on already
            ended = state in (AttemptState.STOPPED, AttemptState.CRASHED, AttemptState.FAILED)
            await uow.attempts.update(
                replace(
                    attempt,
                    state=state,
                    log_tail=log_tail if log_tail is not None else attempt.log_tail,
                    exit_code=exit_code if exit_code is not None else attempt.exit_code,
                    ended_at=self._clock() if ended else attempt.ended_at,
                )
            )
            await uow.commit()

    async def _service_event(
        self, service_id: str, event: ServiceEvent, error: str | None
    ) -> ServiceState | None:
        """Apply an engine event; the new state, or None when the event was stale."""
        async with self._uow_factory() as uow:
            service = await uow.services.get(service_id)
            if service is None:
                return None
            state = apply_event(service.state, event)
            if state is service.state:
                return None
            if not admits_requests(state):
                self._admitting.pop(service_id, None)
            await uow.services.update(
                replace(
                    service,
                    state=state,
                    error=error if state is ServiceState.FAILED else service.error,
                    updated_at=self._clock(),
                )
            )
            await uow.commit()
        return state

    # --- checks ------------------------------------------------------------------------------

    def _runtime(self, name: RuntimeName) -> Runtime:
        runtime = self._runtimes.get(name)
        if runtime is None:
            raise Unavailable(f"runtime {name.value} is not installed on this cluster")
        return runtime

    async def _find_node(self, uow: UnitOfWork, node_id: str | None) -> Node | None:
        if node_id is None:
            local = [node for node in await uow.nodes.list() if node.is_local]
            return local[0] if local else None
        return await uow.nodes.get(node_id)

    async def _node(self, uow: UnitOfWork, node_id: str) -> Node:
        node = await uow.nodes.get(node_id)
        if node is None:
            raise Conflict(f"node {node_id} is no longer part of this cluster")
        return node

    async def _check_spec(self, uow: UnitOfWork, project: str, spec: ServiceSpec) -> Node:
        self._upstream_allow.check(spec)
        node = await self._find_node(uow, spec.node)
        if node is None:
            raise InvalidInput(f"node {spec.node} is not a node of this cluster", field="node")
        if uses_local_model(spec.runtime):
            model = await uow.models.get(spec.model)
            if model is None or model.project != project:
                raise InvalidInput(
                    f"model {spec.model} is not in the catalogue of project {project}",
                    field="model",
                )
            check_context(spec, model.manifest.get("metadata", {}))
        return node

    async def _check_runtime(self, spec: ServiceSpec, node: Node) -> None:
        self._upstream_allow.check(spec)  # the owner may have withdrawn it since the create
        availability = await self._runtime(spec.runtime).availability(_node_info(node))
        if not availability.available:
            raise Conflict(
                f"runtime {spec.runtime.value} cannot run on node {node.id}: "
                + "; ".join(availability.reasons),
                details={"runtime": spec.runtime.value, "reasons": list(availability.reasons)},
            )

    async def _model_file(self, uow: UnitOfWork, project: str, spec: ServiceSpec) -> Path | None:
        if not uses_local_model(spec.runtime):
            return None
        model = await uow.models.get(spec.model)
        if model is None or model.project != project:
            raise Conflict(f"model {spec.model} is no longer in the catalogue")
        if not await self._present(uow, model):
            raise Conflict(
                f"model {model.id} has files missing from the blob store",
                details={"model": model.id, "reason": "files_missing"},
            )
        return self._model_path(model)

    async def _present(self, uow: UnitOfWork, model: CatalogueModel) -> bool:
        """Whether the model's files are stored and its project owns every one of them.

        A blob stored for another project reads as missing: a record naming a digest is no
        capability to its bytes, and no oracle of whether they are stored.
        """
        if not await uow.models.owns_blobs(model.project, model.blob_digests()):
            return False
        return self._model_path(model).exists()

    async def _audit(
        self,
        uow: UnitOfWork,
        actor: Actor,
        project: str,
        action: str,
        target: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        await audit.record(
            uow,
            self._clock,
            action=action,
            actor=actor.name,
            project=project,
            target=target,
            details=details,
            peer_hypernet_id=actor.peer_hypernet_id,
            peer_cluster_key=actor.peer_cluster_key,
        )


def _parse_revision(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput("revision must be a positive integer", field="revision")
    return value


def _check_revision(service: ServiceRecord, expected: int) -> None:
    if service.revision != expected:
        raise RevisionMismatch(
            f"revision {expected} is stale; the service is at revision {service.revision}",
            details={"revision": service.revision},
        )


def _node_info(node: Node) -> NodeInfo:
    return NodeInfo(node_id=node.id, local=node.is_local, gpu_count=len(node.gpus))


def _capacity(node: Node) -> Capacity:
    return Capacity(
        cpu_count=node.cpu_count,
        memory_bytes=node.memory_bytes,
        memory_available_bytes=node.memory_available_bytes,
        gpu_count=len(node.gpus),
    )


def _preview_json(
    spec: ServiceSpec,
    node: Node | None,
    reasons: list[str],
    warnings: list[str],
    need: dict[str, int],
) -> dict[str, Any]:
    return {
        "fits": not reasons,
        "reasons": reasons,
        "warnings": warnings,
        "node": None if node is None else node.id,
        "spec": spec.to_json(),
        "requirements": need,
    }


def service_json(service: ServiceRecord, attempts: list[AttemptRecord]) -> dict[str, Any]:
    """A service as its owner sees it (with engine log lines; peers get a filtered view).

    Plain JSON values only (times as RFC 3339 strings): the same object is kept in the
    receipt of an idempotent change and replayed from there.
    """
    return {
        "id": service.id,
        "spec": service.spec.to_json(),
        "node": service.node,
        "state": service.state.value,
        "revision": service.revision,
        "error": service.error,
        "created_by_grant": service.created_by_grant,
        "unknown_attempts": sum(1 for a in attempts if a.state is AttemptState.UNKNOWN),
        "replicas": [
            {
                "attempt": attempt.id,
                "replica": attempt.replica,
                "state": attempt.state.value,
                "pid": attempt.pid,
                "port": attempt.port,
                "exit_code": attempt.exit_code,
                "log_tail": attempt.log_tail,
                "created_at": format_time(attempt.created_at),
                "ended_at": None if attempt.ended_at is None else format_time(attempt.ended_at),
            }
            for attempt in attempts
        ],
        "created_at": format_time(service.created_at),
        "updated_at": format_time(service.updated_at),
    }
