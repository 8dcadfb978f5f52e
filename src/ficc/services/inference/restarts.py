"""Starting a crashed service again: the crash loop's memory and the record of each decision.

An engine that ends by itself is started again as its service's restart policy says
(``decide_restart``: backoff, and ``failed`` after too many crashes), once every replica of the
service has ended; the supervisor waits out the backoff and launches what this records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Final

from ficc.domain.inference import (
    CrashLoop,
    DesiredState,
    RestartPolicy,
    ServiceEvent,
    ServiceState,
    apply_event,
    decide_restart,
)
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services import audit
from ficc.services.inference.records import (
    START_TIMEOUT_SECONDS,
    STOP_GRACE_SECONDS,
    grant_lapsed,
    record_attempts,
)
from ficc.services.ports import Clock, UnitOfWorkFactory

SUPERVISOR_ACTOR: Final = "ficc:supervisor"
"""Who restarts a crashed engine, in the audit log."""
RESTARTABLE_STATES: Final = frozenset({ServiceState.STARTING, ServiceState.RUNNING})

RestartCounter = Callable[[RestartPolicy], None]
"""Told of every restart of a crashed service (the metrics' counter), by its policy."""


@dataclass(frozen=True)
class Supervision:
    """How this process supervises replicas: the instance it serves as (recorded on each
    attempt it launches), how long an engine may take to start and to stop, and who counts
    the restarts."""

    serve_instance: str
    start_timeout_seconds: float = START_TIMEOUT_SECONDS
    stop_grace_seconds: float = STOP_GRACE_SECONDS
    on_restart: RestartCounter | None = None


@dataclass(frozen=True)
class Backoff:
    """A restart decided: after ``delay_seconds``, unless the service's revision moved on."""

    revision: int
    delay_seconds: float


@dataclass(eq=False)
class Restarts:
    """What the supervisor remembers of each service between its crashes, and what it records
    when one ends by itself or starts again."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    supervision: Supervision
    _loops: dict[str, CrashLoop] = field(default_factory=dict, init=False)
    _running_since: dict[str, datetime] = field(default_factory=dict, init=False)
    _backoff: set[str] = field(default_factory=set, init=False)
    """Services waiting to be started again after a crash."""
    _launches: dict[str, tuple[Node, Path | None]] = field(default_factory=dict, init=False)
    """What each service's last launch ran with: a restart launches the same again."""

    def launching(
        self, service_id: str, node: Node, model_path: Path | None, *, restarting: bool
    ) -> None:
        """A launch begins: a user's start (not ``restarting``) begins a new crash loop."""
        self._launches[service_id] = (node, model_path)
        if not restarting:
            self._loops.pop(service_id, None)
        self._running_since.pop(service_id, None)

    def running(self, service_id: str, since: datetime) -> None:
        """Every replica answered: how long it then runs tells a crash loop from a crash."""
        self._running_since[service_id] = since

    def last_launch(self, service_id: str) -> tuple[Node, Path | None] | None:
        return self._launches.get(service_id)

    def waiting(self) -> frozenset[str]:
        """Services waiting out a restart's backoff."""
        return frozenset(self._backoff)

    def waited(self, service_id: str) -> None:
        """The backoff is over (not when cancelled: the shutdown records the service stopped)."""
        self._backoff.discard(service_id)

    def forget(self, service_id: str) -> None:
        self._loops.pop(service_id, None)
        self._running_since.pop(service_id, None)
        self._launches.pop(service_id, None)
        self._backoff.discard(service_id)

    def tracked_services(self) -> frozenset[str]:
        return frozenset({*self._loops, *self._running_since, *self._launches, *self._backoff})

    async def ended_by_itself(
        self, service_id: str, description: str, *, clean_exit: bool
    ) -> Backoff | None:
        """Every replica of a service has ended after one ended without being asked: record it
        starting again after the backoff (returned), or ``failed`` (policy, crash loop, lapsed
        grant)."""
        async with self.uow_factory() as uow:
            service = await uow.services.get(service_id)
            if service is None:
                return None
            now = self.clock()
            running_since = self._running_since.pop(service_id, None)
            decision = None
            if service.desired is DesiredState.RUNNING and service.state in RESTARTABLE_STATES:
                decision = decide_restart(
                    service.spec.restart,
                    clean_exit=clean_exit,
                    loop=self._loops.get(service_id, CrashLoop()),
                    now=now,
                    running_since=running_since,
                )
                self._loops[service_id] = decision.loop
                if decision.restart and await grant_lapsed(uow, service, now):
                    decision = replace(
                        decision, restart=False, reason="its grant is no longer active"
                    )
            if decision is None or not decision.restart:
                state = apply_event(service.state, ServiceEvent.CRASHED)
                if state is service.state:
                    return None
                error = description
                if decision is not None and decision.reason is not None:
                    error = f"{description}; {decision.reason}"
                await uow.services.update(
                    replace(service, state=state, error=error, updated_at=now)
                )
                await uow.commit()
                return None
            state = apply_event(service.state, ServiceEvent.RESTARTING)
            error = (
                f"{description}; starting again in {decision.delay_seconds:g} s "
                f"(restart {decision.loop.consecutive})"
            )
            await uow.services.update(replace(service, state=state, error=error, updated_at=now))
            await uow.commit()
        self._backoff.add(service_id)
        return Backoff(service.revision, decision.delay_seconds)

    async def record_restart(
        self, service_id: str, backoff: Backoff, supervised: Callable[[], bool]
    ) -> tuple[ServiceRecord, list[AttemptRecord]] | None:
        """After the backoff, record the new attempts and the audit row of a restart, unless
        someone changed the service meanwhile or ``supervised`` (it has replicas again)."""
        async with self.uow_factory() as uow:
            service = await uow.services.get(service_id)
            if (
                service is None
                or service.state is not ServiceState.STARTING
                or service.desired is not DesiredState.RUNNING
                or service.revision != backoff.revision
                or supervised()
            ):
                return None
            attempts = await record_attempts(
                uow, service, self.supervision.serve_instance, self.clock()
            )
            loop = self._loops.get(service_id, CrashLoop())
            await audit.record(
                uow,
                self.clock,
                action="service.restart",
                actor=SUPERVISOR_ACTOR,
                project=service.project,
                target=service_id,
                details={
                    "restart": loop.consecutive,
                    "policy": service.spec.restart.value,
                    "delay_seconds": backoff.delay_seconds,
                    "reason": service.error,
                },
            )
            await uow.commit()
        if self.supervision.on_restart is not None:
            self.supervision.on_restart(service.spec.restart)
        return service, attempts
