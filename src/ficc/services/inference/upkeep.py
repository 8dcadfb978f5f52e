"""What FICC does to services by itself: stop a revoked grant's services, and bring services
back after its own restart. No user asks for these, so no receipt is kept; each runs under the
service's lock, as a user's change would."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from ficc.base.errors import FiccError
from ficc.domain.grants import Grant
from ficc.domain.inference import (
    DesiredState,
    Operation,
    ServiceState,
    desired_after,
    plan_operation,
)
from ficc.services.inference.commands import ServiceCommands
from ficc.services.inference.records import Actor, record_audit

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
                    state = plan_operation(service.state, Operation.STOP).to_state
                    desired = desired_after(Operation.STOP, service.desired)
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
