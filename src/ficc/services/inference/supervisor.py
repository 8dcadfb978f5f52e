"""Supervision of engine replicas: launch, watch, restart, drain, stop, and FICC's own restart.

Every replica attempt is recorded before its engine is launched (write-ahead). After a FICC
restart, an attempt with a recorded process is fenced (killed by pid and start time) and one
without is *unknown*. An engine that ends by itself is started again as its service's restart
policy says (``decide_restart``: backoff, and ``failed`` after too many crashes), once every
replica of the service has ended. Every state change goes through the domain's tables:
``apply_event`` for services, ``next_attempt_state`` for attempts, ``plan_operation`` for the
shutdown's stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from ficc.base.errors import Conflict, FiccError, RuntimeNotInstalled
from ficc.domain.inference import (
    AttemptEvent,
    AttemptState,
    CrashLoop,
    DesiredState,
    Operation,
    RestartPolicy,
    RuntimeName,
    ServiceEvent,
    ServiceState,
    admits_requests,
    apply_event,
    decide_restart,
    next_attempt_state,
    plan_operation,
    recovery_event,
)
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services import audit
from ficc.services.inference.records import (
    AttemptFence,
    grant_lapsed,
    node_info,
    record_attempts,
)
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.runtimes import LaunchRequest, ProcessIdentity, ReplicaHandle, Runtime

log = logging.getLogger("ficc.inference")

SUPERVISOR_ACTOR: Final = "ficc:supervisor"
"""Who restarts a crashed engine, in the audit log."""
RESTARTABLE_STATES: Final = frozenset({ServiceState.STARTING, ServiceState.RUNNING})

RestartCounter = Callable[[RestartPolicy], None]
"""Told of every restart of a crashed service (the metrics' counter), by its policy."""


class ReplicaSupervisor:
    """Owns the replica handles, the background tasks and the per-service locks."""

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        runtimes: Mapping[RuntimeName, Runtime],
        router: InvocationRouter,
        fence_attempt: AttemptFence,
        *,
        serve_instance: str,
        start_timeout_seconds: float,
        stop_grace_seconds: float,
        on_restart: RestartCounter | None = None,
    ) -> None:
        self._uow_factory = uow_factory
        self._clock = clock
        self._runtimes = runtimes
        self._router = router
        self._fence_attempt = fence_attempt
        self._start_timeout = start_timeout_seconds
        self._grace = stop_grace_seconds
        self._handles: dict[str, list[ReplicaHandle]] = {}
        self._stopping: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._serve_instance = serve_instance
        self._on_restart = on_restart
        self._loops: dict[str, CrashLoop] = {}
        self._running_since: dict[str, datetime] = {}
        self._backoff: set[str] = set()
        """Services waiting to be started again after a crash."""
        self._launches: dict[str, tuple[Node, Path | None]] = {}
        """What each service's last launch ran with: a restart launches the same again."""

    def runtime(self, name: RuntimeName) -> Runtime:
        """The installed runtime ``name``; RuntimeNotInstalled when this cluster has none."""
        runtime = self._runtimes.get(name)
        if runtime is None:
            raise RuntimeNotInstalled.of(name.value)
        return runtime

    def runtimes(self) -> list[Runtime]:
        """Every installed runtime, for the offers of ``prepare``."""
        return list(self._runtimes.values())

    async def lock_of(self, service_id: str) -> asyncio.Lock | None:
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

    def forget(self, service_id: str) -> None:
        """A removed service leaves nothing behind; its caller holds (and drops) its lock."""
        self._locks.pop(service_id, None)
        self._stopping.discard(service_id)
        self._loops.pop(service_id, None)
        self._running_since.pop(service_id, None)
        self._launches.pop(service_id, None)
        self._backoff.discard(service_id)
        self._router.forget(service_id)

    def tracked_services(self) -> frozenset[str]:
        """The service IDs any per-service map holds; bounded by the services that exist."""
        return frozenset(
            {
                *self._handles,
                *self._stopping,
                *self._locks,
                *self._loops,
                *self._running_since,
                *self._launches,
                *self._backoff,
                *self._router.tracked_services(),
            }
        )

    async def release_unknown(self, attempts: list[AttemptRecord]) -> None:
        """Kill whatever an acknowledged unknown attempt may have left running."""
        for attempt in attempts:
            if attempt.state is AttemptState.UNKNOWN:
                await self._fence_attempt(attempt.id, self._grace)

    # --- FICC's own lifecycle ----------------------------------------------------------------

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
                        try:
                            await self.runtime(service.spec.runtime).fence(
                                ProcessIdentity(attempt.pid, attempt.pid_start_ticks or -1),
                                self._grace,
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
                            ended_at=self._clock(),
                        )
                    )
                state = apply_event(service.state, ServiceEvent.INTERRUPTED)
                if state is not service.state:
                    reason = f"FICC restarted while the service was {service.state.value}"
                    reason += "; its replicas were stopped"
                    if lost:
                        reason += f"; {lost} replica attempt(s) have an unknown outcome"
                    await uow.services.update(
                        replace(service, state=state, error=reason, updated_at=self._clock())
                    )
            await uow.commit()

    async def close(self) -> None:
        """At a clean shutdown: stop every engine and record the services as stopped (those
        waiting out a restart's backoff too); their desired state stays."""
        self._router.close_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for service_id in sorted({*self._handles, *self._backoff}):
            await self.stop_replicas(service_id)
            async with self._uow_factory() as uow:
                service = await uow.services.get(service_id)
                if service is not None:
                    state = plan_operation(service.state, Operation.STOP).to_state
                    assert state is not None  # stop keeps the record
                    if state is not service.state:
                        await uow.services.update(
                            replace(service, state=state, updated_at=self._clock())
                        )
                await uow.commit()

    async def let_go(self) -> None:
        """After this process lost the active lease: end its engines and record nothing (the
        records are the new active's now; fencing their attempts finds them ended)."""
        self._router.close_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for service_id in sorted(self._handles):
            self._stopping.add(service_id)
            for handle in self._handles.pop(service_id):
                await self.runtime(handle.runtime).stop(handle, self._grace)

    # --- replicas ----------------------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background, kept (and cancelled at close) by the supervisor.

        A task cancelled before its first step never runs ``work``: it is closed then, so that
        a shutdown right after a start leaves no never-awaited coroutine behind.
        """

        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:  # the outermost handler of a background task
                log.exception("background inference work failed")

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            work.close()

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(done)

    async def launch(
        self,
        service: ServiceRecord,
        node: Node,
        model_path: Path | None,
        attempts: list[AttemptRecord],
        *,
        restarting: bool = False,
    ) -> None:
        """Launch the recorded attempts, then wait for every replica to answer its health.

        ``restarting``: a restart after a crash, whose failure to come up counts as one more
        crash of the loop (a user's start that fails is ``failed`` at once, for the user to see).
        """
        runtime = self.runtime(service.spec.runtime)
        handles: list[ReplicaHandle] = []
        self._router.close(service.id)
        self._handles[service.id] = handles
        self._stopping.discard(service.id)
        self._launches[service.id] = (node, model_path)
        if not restarting:
            self._loops.pop(service.id, None)
        self._running_since.pop(service.id, None)

        def superseded() -> bool:
            """A stop, a crash or a newer start has taken this launch's replicas away."""
            return self._handles.get(service.id) is not handles

        for index, attempt in enumerate(attempts):
            if superseded():
                await self._never_launched(attempts[index:])
                return
            request = LaunchRequest(
                attempt_id=attempt.id,
                node=node_info(node),
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
                    await self._launch_failed(service.id, exc.message, restarting)
                return
            await self._attempt_launched(attempt.id, handle)
            if superseded():
                # Stopped while this engine was being launched: end it here, or nobody will.
                await self._end_replica(handle)
                await self._never_launched(attempts[index + 1 :])
                return
            handles.append(handle)
            self.spawn(self._watch(service.id, runtime, handle))
        for handle in list(handles):
            health = await runtime.wait_ready(handle, self._start_timeout)
            if superseded():
                return
            if not health.healthy:
                claimed = self._claim(service.id)  # before any await: no watch takes it too
                tail = "\n".join(runtime.log_tail(handle))
                await self._attempt_event(handle.attempt_id, AttemptEvent.LAUNCH_FAILED, tail)
                await self._launch_failed(
                    service.id, health.reason or "engine not ready", restarting, claimed
                )
                return
            await self._attempt_event(handle.attempt_id, AttemptEvent.HEALTHY)
        if not superseded():
            await self._service_event(service.id, ServiceEvent.READY, None, tuple(handles))

    async def _never_launched(self, attempts: list[AttemptRecord]) -> None:
        """Attempts a launch gave up before starting them: provably no process, not pending.

        Left pending, they would read as "unknown outcome" after a FICC restart.
        """
        for attempt in attempts:
            await self._attempt_event(attempt.id, AttemptEvent.LAUNCH_FAILED)

    def _claim(self, service_id: str) -> list[ReplicaHandle]:
        """Take a service's replicas away from every other path, without awaiting anything:
        the one path that claims them ends them and decides what the service becomes."""
        self._stopping.add(service_id)
        self._router.close(service_id)
        return list(self._handles.pop(service_id, []))

    async def _launch_failed(
        self,
        service_id: str,
        reason: str,
        restarting: bool,
        claimed: list[ReplicaHandle] | None = None,
    ) -> None:
        handles = self._claim(service_id) if claimed is None else claimed
        for other in handles:
            await self._end_replica(other)
        if restarting:
            await self._ended_by_itself(service_id, reason, clean_exit=False)
        else:
            await self._service_event(service_id, ServiceEvent.LAUNCH_FAILED, reason)

    async def _watch(self, service_id: str, runtime: Runtime, handle: ReplicaHandle) -> None:
        ended = await runtime.wait_exited(handle)
        if service_id in self._stopping or handle not in self._handles.get(service_id, []):
            return
        handles = self._claim(service_id)
        tail = "\n".join(ended.log_tail or runtime.log_tail(handle))
        await self._attempt_event(handle.attempt_id, AttemptEvent.CRASHED, tail, ended.exit_code)
        for other in handles:
            await self._end_replica(other)  # the crashed one too: its runtime lets go of it
        clean = ended.exit_code == 0 and ended.signal is None and ended.reason is None
        await self._ended_by_itself(service_id, ended.describe(), clean_exit=clean)

    async def _ended_by_itself(
        self, service_id: str, description: str, *, clean_exit: bool
    ) -> None:
        """Every replica of a service has ended after one ended without being asked: start it
        again after the backoff, or record it ``failed`` (policy, crash loop, lapsed grant)."""
        async with self._uow_factory() as uow:
            service = await uow.services.get(service_id)
            if service is None:
                return
            now = self._clock()
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
                    return
                error = description
                if decision is not None and decision.reason is not None:
                    error = f"{description}; {decision.reason}"
                await uow.services.update(
                    replace(service, state=state, error=error, updated_at=now)
                )
                await uow.commit()
                return
            state = apply_event(service.state, ServiceEvent.RESTARTING)
            error = (
                f"{description}; starting again in {decision.delay_seconds:g} s "
                f"(restart {decision.loop.consecutive})"
            )
            await uow.services.update(replace(service, state=state, error=error, updated_at=now))
            await uow.commit()
        self._backoff.add(service_id)
        self.spawn(self._restart_later(service_id, service.revision, decision.delay_seconds))

    async def _restart_later(self, service_id: str, revision: int, delay_seconds: float) -> None:
        """After the backoff, start the service again, unless someone changed it meanwhile."""
        await asyncio.sleep(delay_seconds)
        self._backoff.discard(service_id)  # not when cancelled: the shutdown records it stopped
        lock = await self.lock_of(service_id)
        launch = self._launches.get(service_id)
        if lock is None or launch is None:
            return
        async with lock:
            async with self._uow_factory() as uow:
                service = await uow.services.get(service_id)
                if (
                    service is None
                    or service.state is not ServiceState.STARTING
                    or service.desired is not DesiredState.RUNNING
                    or service.revision != revision
                    or service_id in self._handles
                ):
                    return
                attempts = await record_attempts(uow, service, self._serve_instance, self._clock())
                loop = self._loops.get(service_id, CrashLoop())
                await audit.record(
                    uow,
                    self._clock,
                    action="service.restart",
                    actor=SUPERVISOR_ACTOR,
                    project=service.project,
                    target=service_id,
                    details={
                        "restart": loop.consecutive,
                        "policy": service.spec.restart.value,
                        "delay_seconds": delay_seconds,
                        "reason": service.error,
                    },
                )
                await uow.commit()
            if self._on_restart is not None:
                self._on_restart(service.spec.restart)
            node, model_path = launch
            self.spawn(self.launch(service, node, model_path, attempts, restarting=True))

    def drain(self, service_id: str) -> None:
        """Stop the replicas once the requests in flight have ended (in the background)."""
        self.spawn(self._finish_drain(service_id))

    async def _finish_drain(self, service_id: str) -> None:
        handles = self._handles.get(service_id)
        await self._router.idle(service_id)
        if handles is not None and self._handles.get(service_id) is not handles:
            return  # stopped, crashed or started again meanwhile: not this drain's replicas
        await self.stop_replicas(service_id)
        await self._service_event(service_id, ServiceEvent.DRAINED, None)

    async def stop_replicas(self, service_id: str) -> None:
        """End every replica of ``service_id``; a launch in progress ends its own."""
        # Marked even when no replica is known yet: a launch in progress sees it is superseded
        # and ends the engine it is starting itself.
        self._stopping.add(service_id)
        self._router.close(service_id)
        handles = list(self._handles.pop(service_id, []))
        for handle in handles:
            await self._end_replica(handle)

    async def _end_replica(self, handle: ReplicaHandle) -> None:
        runtime = self.runtime(handle.runtime)
        await self._attempt_event(handle.attempt_id, AttemptEvent.STOP)
        ended = await runtime.stop(handle, self._grace)
        await self._attempt_event(handle.attempt_id, AttemptEvent.EXITED, None, ended.exit_code)

    # --- records -----------------------------------------------------------------------------

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
        self,
        service_id: str,
        event: ServiceEvent,
        error: str | None,
        ready: tuple[ReplicaHandle, ...] = (),
    ) -> None:
        """Apply an engine event; a stale one changes nothing.

        ``ready``: the replicas a READY event opens to requests, published in the same step
        as the commit so that no request can see a running service without them.
        """
        async with self._uow_factory() as uow:
            service = await uow.services.get(service_id)
            if service is None:
                return
            state = apply_event(service.state, event)
            if state is service.state:
                return
            if not admits_requests(state):
                self._router.close(service_id)
            if state is ServiceState.FAILED:
                shown = error
            elif state is ServiceState.RUNNING:
                shown = None  # a restart's reason is kept in the audit log, not here
            else:
                shown = service.error
            now = self._clock()
            await uow.services.update(replace(service, state=state, error=shown, updated_at=now))
            await uow.commit()
            if state is ServiceState.RUNNING:
                self._running_since[service_id] = now
            if admits_requests(state) and ready:
                self._router.open(
                    service_id, service.project, service.spec.runtime, ready, service.spec.options
                )
