"""What FICC does to services by itself: stop a revoked grant's services, and bring services
back after its own restart (adopting replicas that outlived it, starting the others again). No
user asks for these, so no receipt is kept; each runs under the service's lock, as a user's
change would."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from ficc.base.errors import FiccError
from ficc.domain.grants import Grant
from ficc.domain.inference import (
    AttemptState,
    ControlAction,
    DesiredState,
    ServiceState,
    desired_after,
    plan_action,
    recovery_event,
)
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services.inference.commands import RESTORE_ACTOR, ServiceCommands
from ficc.services.inference.records import Actor, grant_lapsed, record_audit
from ficc.services.ports.runtimes import ProcessIdentity, ReplicaAdopter, ReplicaHandle

Adoptable = tuple[ServiceRecord, Node, Path | None, list[AttemptRecord]]

STOP_ON_REVOKE_ACTOR: Final = Actor("stop_on_revoke")
"""Who stops a revoked grant's services, in the audit log."""


@dataclass(frozen=True)
class ServiceUpkeep:
    """A grant's ending and FICC's own restart, applied to the services they concern through
    the commands' own store, clock and supervisor."""

    commands: ServiceCommands

    async def stop_for_grant(self, grant: Grant) -> None:
        """With ``stop_on_revoke``, an ended grant's services are stopped."""
        if not grant.terms.stop_on_revoke:
            return
        for service_id in sorted(grant.created_services):
            lock = await self.commands.supervisor.lock_of(service_id)
            if lock is None:
                continue
            async with lock:
                async with self.commands.uow_factory() as uow:
                    service = await uow.services.get(service_id)
                    if service is None:
                        continue
                    state = plan_action(service.state, ControlAction.STOP).to_state
                    desired = desired_after(ControlAction.STOP, service.desired)
                    if state is None or (state is service.state and desired is service.desired):
                        continue
                    changed = replace(
                        service,
                        state=state,
                        desired=desired,
                        revision=service.revision + 1,
                        updated_at=self.commands.clock(),
                    )
                    await uow.services.update(changed)
                    await record_audit(
                        uow,
                        self.commands.clock,
                        STOP_ON_REVOKE_ACTOR,
                        service.project,
                        "service.stop",
                        service_id,
                        {"grant": grant.id},
                    )
                    await uow.commit()
                await self.commands.supervisor.stop_replicas(service_id)

    async def adopt(self) -> frozenset[str]:
        """After FICC's own restart (or a takeover), before anything is fenced: supervise again
        each running service whose every replica outlived the earlier process and answers
        (runtimes whose replicas outlive FICC: Ray's detached actors). A service is adopted whole
        or not at all; the IDs adopted."""
        adopted: set[str] = set()
        for service, node, model_path, attempts in await self._adoptable():
            lock = await self.commands.supervisor.lock_of(service.id)
            if lock is None:
                continue
            async with lock:
                handles = await self._adopt_replicas(service, attempts)
                if handles is None:
                    continue
                async with self.commands.uow_factory() as uow:
                    details: dict[str, object] = {"attempts": [attempt.id for attempt in attempts]}
                    await record_audit(
                        uow,
                        self.commands.clock,
                        RESTORE_ACTOR,
                        service.project,
                        "service.adopted",
                        service.id,
                        details,
                    )
                    await uow.commit()
                self.commands.supervisor.adopt(service, node, model_path, handles)
                adopted.add(service.id)
        return frozenset(adopted)

    async def _adoptable(self) -> list[Adoptable]:
        """Running services on an adopting runtime whose live attempts are exactly their
        replicas, each healthy with its process recorded."""
        found: list[Adoptable] = []
        async with self.commands.uow_factory() as uow:
            for service in await uow.services.list_all():
                runtime = self.commands.supervisor.runtimes_by_name().get(service.spec.runtime)
                if (
                    not isinstance(runtime, ReplicaAdopter)
                    or service.state is not ServiceState.RUNNING
                    or service.desired is not DesiredState.RUNNING
                    or await grant_lapsed(uow, service, self.commands.clock())
                ):
                    continue
                attempts = await uow.attempts.for_service(service.id)
                live = [a for a in attempts if recovery_event(a.state) is not None]
                if len(live) != service.spec.replicas or any(
                    a.state is not AttemptState.HEALTHY or a.pid is None for a in live
                ):
                    continue
                node = await uow.nodes.get(service.node)
                if node is None:
                    continue
                try:
                    model_path = await self.commands.admission.model_file(
                        uow, service.project, service.spec
                    )
                except FiccError:
                    continue
                found.append((service, node, model_path, live))
        return found

    async def _adopt_replicas(
        self, service: ServiceRecord, attempts: list[AttemptRecord]
    ) -> list[ReplicaHandle] | None:
        """Every attempt's replica adopted, or none kept (those taken are let go again)."""
        runtime = self.commands.supervisor.runtime(service.spec.runtime)
        assert isinstance(runtime, ReplicaAdopter)
        handles: list[ReplicaHandle] = []
        for attempt in attempts:
            assert attempt.pid is not None
            process = ProcessIdentity(attempt.pid, attempt.pid_start_ticks or -1)
            handle = await runtime.adopt(attempt.id, process, service.node, service.id)
            if handle is None:
                for taken in handles:
                    await runtime.let_go(taken)
                return None
            handles.append(handle)
        return handles

    async def restore(self) -> None:
        """After FICC's own restart: start again every stopped service whose desired state is
        running. One whose earlier attempt's outcome is unknown (or that cannot start now)
        stays stopped with the reason in its error; ``start`` with ``acknowledge_unknown``
        then starts it, as for any unknown outcome."""
        async with self.commands.uow_factory() as uow:
            waiting = [
                s
                for s in await uow.services.list_all()
                if s.desired is DesiredState.RUNNING and s.state is ServiceState.STOPPED
            ]
        for service in waiting:
            lock = await self.commands.supervisor.lock_of(service.id)
            if lock is None:
                continue
            async with lock:
                try:
                    await self.commands.start_restored(service)
                except FiccError as exc:
                    await self._not_restored(service.id, exc.message)

    async def _not_restored(self, service_id: str, why: str) -> None:
        async with self.commands.uow_factory() as uow:
            service = await uow.services.get(service_id)
            if service is None or service.state is not ServiceState.STOPPED:
                return
            reason = f"not started again after FICC's restart: {why}"
            if service.error and reason in service.error:
                return
            if service.error:
                reason = f"{service.error}; {reason}"
            await uow.services.update(
                replace(service, error=reason, updated_at=self.commands.clock())
            )
            await uow.commit()
