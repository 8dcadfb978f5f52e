"""The write-ahead record of each replica attempt's life, and FICC's own restart.

Every replica attempt is recorded before its engine is launched; each later event of its
engine moves the record through ``next_attempt_state``. After a FICC restart, an attempt with a
recorded process is fenced (killed by pid and start time) and one without is *unknown*.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ficc.base.errors import Conflict, FiccError
from ficc.domain.inference import (
    AttemptEvent,
    AttemptState,
    RuntimeName,
    ServiceEvent,
    apply_event,
    next_attempt_state,
    recovery_event,
)
from ficc.domain.service_records import AttemptRecord
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.ports.runtimes import ProcessIdentity, ReplicaHandle, Runtime


@dataclass(frozen=True, eq=False)
class AttemptLog:
    """Writes what happened to one replica attempt, each change in its own transaction."""

    uow_factory: UnitOfWorkFactory
    clock: Clock

    async def launched(self, attempt_id: str, handle: ReplicaHandle) -> None:
        """The engine runs: its process is recorded, for a later FICC to fence it."""
        async with self.uow_factory() as uow:
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

    async def event(
        self,
        attempt_id: str,
        event: AttemptEvent,
        log_tail: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        """Apply an engine event to the attempt; a stale one changes nothing."""
        async with self.uow_factory() as uow:
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
                    ended_at=self.clock() if ended else attempt.ended_at,
                )
            )
            await uow.commit()

    async def never_launched(self, attempts: list[AttemptRecord]) -> None:
        """Attempts a launch gave up before starting them: provably no process, not pending.

        Left pending, they would read as "unknown outcome" after a FICC restart.
        """
        for attempt in attempts:
            await self.event(attempt.id, AttemptEvent.LAUNCH_FAILED)


async def recover_attempts(
    uow_factory: UnitOfWorkFactory,
    clock: Clock,
    runtime: Callable[[RuntimeName], Runtime],
    grace_seconds: float,
    *,
    keep: frozenset[str] = frozenset(),
) -> None:
    """At start: nothing from an earlier FICC process is believed running (but the services in
    ``keep``, whose replicas were adopted).

    Each attempt that may have left a process is fenced through ``runtime`` (the installed
    runtime of its service) or, when that cannot be proved, recorded lost; each service that
    was up is recorded interrupted, with how many attempts have an unknown outcome.
    """
    async with uow_factory() as uow:
        for service in await uow.services.list_all():
            if service.id in keep:
                continue
            lost = 0
            for attempt in await uow.attempts.for_service(service.id):
                event = recovery_event(attempt.state)
                if event is None:
                    continue
                if event is AttemptEvent.RECOVERED and attempt.pid is not None:
                    try:
                        await runtime(service.spec.runtime).fence(
                            ProcessIdentity(attempt.pid, attempt.pid_start_ticks or -1),
                            grace_seconds,
                        )
                    except FiccError:
                        # Not fenced: whether its process still runs cannot be proved.
                        event = AttemptEvent.LOST
                if event is AttemptEvent.LOST:
                    lost += 1
                await uow.attempts.update(
                    replace(
                        attempt,
                        state=next_attempt_state(attempt.state, event),
                        ended_at=clock(),
                    )
                )
            state = apply_event(service.state, ServiceEvent.INTERRUPTED)
            if state is not service.state:
                reason = f"FICC restarted while the service was {service.state.value}"
                reason += "; its replicas were stopped"
                if lost:
                    reason += f"; {lost} replica attempt(s) have an unknown outcome"
                await uow.services.update(
                    replace(service, state=state, error=reason, updated_at=clock())
                )
        await uow.commit()
