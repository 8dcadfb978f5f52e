"""The use cases that change services: create, replace and control.

``revision`` grows with every user change (create, replace, control); engine events (ready,
crashed, drained) change ``state`` but not ``revision``, so a caller's revision stays valid
while a service comes up. Every target state comes from ``plan_action`` (or
``check_start``): no use case names the state it moves a service to.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from ficc.base.errors import Conflict, InvalidInput, NotFound
from ficc.base.ids import new_id
from ficc.base.json_types import JSONObject
from ficc.domain.inference import (
    AttemptEvent,
    AttemptState,
    ControlAction,
    ServiceSpec,
    ServiceState,
    check_context,
    check_start,
    desired_after,
    next_attempt_state,
    parse_control_action,
    parse_service_spec,
    plan_action,
)
from ficc.domain.mutations import derived_entropy
from ficc.domain.service_records import ServiceRecord, ServiceView
from ficc.services import mutations
from ficc.services.inference.admission import Admission
from ficc.services.inference.records import (
    Actor,
    check_revision,
    grant_lapsed,
    load_service,
    parse_revision,
    record_attempts,
    record_audit,
    view_of,
)
from ficc.services.inference.router import InvocationRouter
from ficc.services.inference.supervisor import ReplicaSupervisor
from ficc.services.mutations import MutationKey
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory

Outcome = tuple[JSONObject, bool]
"""A change's result view and whether it was replayed from its receipt."""

RESTORE_ACTOR: Final = Actor("ficc:restore")
"""Who starts a service again after FICC's own restart, in the audit log."""


@dataclass(frozen=True)
class ServiceCommands:
    """Changes of service records; the supervisor runs what they decide."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    supervisor: ReplicaSupervisor
    router: InvocationRouter
    admission: Admission
    serve_instance: str

    async def list_services(self, project: str) -> list[ServiceView]:
        """The owner's views of every service of ``project``."""
        async with self.uow_factory() as uow:
            return [await view_of(uow, s) for s in await uow.services.list(project)]

    async def get_service(self, project: str, service_id: str) -> ServiceView:
        """The owner's view of one service of ``project``."""
        async with self.uow_factory() as uow:
            return await view_of(uow, await load_service(uow, project, service_id))

    async def create_service(
        self,
        actor: Actor,
        project: str,
        spec_data: object,
        *,
        key: MutationKey | None = None,
        check: Callable[[UnitOfWork, ServiceSpec], Awaitable[None]] | None = None,
    ) -> Outcome:
        """A new service in state ``stopped``; returns (service, replayed)."""
        spec = parse_service_spec(spec_data)
        async with self.uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            node = await self.admission.check_spec(uow, project, spec)
            if check is not None:
                await check(uow, spec)
            entropy = (
                derived_entropy(key.scope, key.mutation_id, "service")
                if key is not None
                else secrets.token_bytes(16)
            )
            service_id = new_id("service", entropy)
            existing = await uow.services.get(service_id)
            if existing is not None:
                # An earlier try of this very mutation created it; its receipt was not kept.
                result = (await view_of(uow, existing)).to_json()
            else:
                now = self.clock()
                service = ServiceRecord(
                    id=service_id,
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
                await uow.services.add(service)
                result = (await view_of(uow, service)).to_json()
                await record_audit(uow, self.clock, actor, project, "service.created", service_id)
            answer = await self._finish(uow, key, result)
        return answer, False

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
        """A new spec for a stopped service."""
        spec = parse_service_spec(spec_data)
        expected = parse_revision(revision)
        async with self.uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await load_service(uow, project, service_id)
            check_revision(service, expected)
            transition = plan_action(service.state, ControlAction.REPLACE)
            assert transition.to_state is not None  # replace keeps the record
            node = await self.admission.check_spec(uow, project, spec)
            updated = replace(
                service,
                spec=spec,
                node=node.id,
                state=transition.to_state,
                revision=service.revision + 1,
                error=None,
                updated_at=self.clock(),
            )
            await uow.services.update(updated)
            await record_audit(uow, self.clock, actor, project, "service.replaced", service_id)
            answer = await self._finish(uow, key, (await view_of(uow, updated)).to_json())
        return answer, False

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
        """start, drain, stop or remove, checked against the current revision."""
        op = parse_control_action(operation)
        if not isinstance(acknowledge_unknown, bool):
            raise InvalidInput(
                "acknowledge_unknown must be a JSON boolean (true or false)",
                field="acknowledge_unknown",
            )
        if acknowledge_unknown and op is not ControlAction.START:
            raise InvalidInput(
                "acknowledge_unknown is accepted only for start", field="acknowledge_unknown"
            )
        expected = parse_revision(revision)
        lock = await self.supervisor.lock_of(service_id)
        if lock is None:
            raise NotFound(
                f"no service {service_id} in project {project}", details={"service": service_id}
            )
        async with lock:
            if op is ControlAction.START:
                return await self._start(
                    actor, project, service_id, expected, acknowledge_unknown, key
                )
            result, replayed = await self._transition(actor, project, service_id, expected, key, op)
            if replayed:
                return result, replayed
            if op is ControlAction.STOP:
                await self.supervisor.stop_replicas(service_id)
                # The answer is the service once its replicas ended; the receipt keeps that
                # one (a retry waits on this lock, so it is answered only after it).
                stopped = await self.get_service(project, service_id)
                return await self._answered(key, stopped.to_json()), False
            if op is ControlAction.DRAIN:
                self.supervisor.drain(service_id)
            return result, False

    async def _start(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        expected: int,
        acknowledge: bool,
        key: MutationKey | None,
        *,
        restoring: bool = False,
    ) -> Outcome:
        """A start; ``restoring``: FICC's own after its restart, which is no user change (the
        revision stays, so that a caller's revision stays valid while the service comes up)."""
        async with self.uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await load_service(uow, project, service_id)
            check_revision(service, expected)
            if restoring and await grant_lapsed(uow, service, self.clock()):
                raise Conflict(f"the grant that created service {service_id} is no longer active")
            attempts = await uow.attempts.for_service(service_id)
            check_start(service.state, [a.state for a in attempts], acknowledge_unknown=acknowledge)
            node = await uow.nodes.get(service.node)
            if node is None:
                raise Conflict(f"node {service.node} is no longer part of this cluster")
            model_path = await self.admission.model_file(uow, project, service.spec)
            await self.admission.check_runtime(service.spec, node)
            if model_path is not None:
                model = await uow.models.get(service.spec.model)
                assert model is not None
                check_context(service.spec, model.manifest.get("metadata", {}))
        if acknowledge:
            # Release every earlier attempt before a new one starts.
            await self.supervisor.release_unknown(attempts)
        async with self.admission.lock, self.uow_factory() as uow:
            service = await load_service(uow, project, service_id)
            check_revision(service, expected)
            transition = plan_action(service.state, ControlAction.START)
            assert transition.to_state is not None  # start keeps the record
            await self.admission.admit(uow, service, node)
            now = self.clock()
            for attempt in await uow.attempts.for_service(service_id):
                if attempt.state is AttemptState.UNKNOWN and acknowledge:
                    state = next_attempt_state(attempt.state, AttemptEvent.ACKNOWLEDGE)
                    await uow.attempts.update(replace(attempt, state=state))
            new_attempts = await record_attempts(uow, service, self.serve_instance, now)
            started = replace(
                service,
                state=transition.to_state,
                desired=desired_after(ControlAction.START, service.desired),
                revision=service.revision + (0 if restoring else 1),
                error=None,
                updated_at=now,
            )
            await uow.services.update(started)
            details: JSONObject = {"acknowledge_unknown": acknowledge}
            if restoring:
                details["restored"] = True
            await record_audit(
                uow, self.clock, actor, project, "service.start", service_id, details
            )
            answer = await self._finish(uow, key, (await view_of(uow, started)).to_json())
        self.supervisor.spawn(self.supervisor.launch(started, node, model_path, new_attempts))
        return answer, False

    async def _transition(
        self,
        actor: Actor,
        project: str,
        service_id: str,
        expected: int,
        key: MutationKey | None,
        action: ControlAction,
    ) -> Outcome:
        """Stop, drain or remove as the table says; the receipt commits in the same transaction."""
        async with self.uow_factory() as uow:
            if key is not None and (done := await mutations.replay(uow, key)) is not None:
                return done, True
            service = await load_service(uow, project, service_id)
            check_revision(service, expected)
            transition = plan_action(service.state, action)
            if transition.to_state is None:
                await uow.attempts.delete_for_service(service_id)
                await uow.services.delete(service_id)
                await record_audit(uow, self.clock, actor, project, "service.removed", service_id)
                result: JSONObject = {"id": service_id, "removed": True}
            else:
                changed = replace(
                    service,
                    state=transition.to_state,
                    desired=desired_after(action, service.desired),
                    revision=service.revision + 1,
                    updated_at=self.clock(),
                )
                await uow.services.update(changed)
                audited = f"service.{action.value}"
                await record_audit(uow, self.clock, actor, project, audited, service_id)
                result = (await view_of(uow, changed)).to_json()
            answer = await self._finish(uow, key, result)
            # No new request from the commit on; those in flight finish (drain) or end (stop).
            self.router.close(service_id)
            if transition.to_state is None:
                # The caller holds this lock; anyone waiting on it finds the service gone.
                self.supervisor.forget(service_id)
        return answer, False

    async def _finish(
        self, uow: UnitOfWork, key: MutationKey | None, result: Mapping[str, object]
    ) -> JSONObject:
        """Keep the receipt of an idempotent change, and commit it with the change: the answer
        (what the caller is shown of ``result``, exactly as a retry will replay it)."""
        answer = dict(result)
        if key is not None:
            answer = await (await mutations.begin(uow, key)).complete(result, self.clock())
        await uow.commit()
        return answer

    async def _answered(self, key: MutationKey | None, result: Mapping[str, object]) -> JSONObject:
        """The answer of a change known only after its commit, kept in its receipt as the
        answer a retry replays."""
        if key is None:
            return dict(result)
        async with self.uow_factory() as uow:
            return await self._finish(uow, key, result)

    async def start_restored(self, service: ServiceRecord) -> None:
        """FICC's own start of ``service`` after its restart, under the caller's lock: no user
        change, so its revision stays (a caller's revision stays valid while it comes up)."""
        await self._start(
            RESTORE_ACTOR,
            service.project,
            service.id,
            service.revision,
            False,
            None,
            restoring=True,
        )
