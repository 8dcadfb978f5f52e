"""Supervision of engine replicas: launch, watch, drain, stop, and FICC's own restart.

Every replica attempt is recorded before its engine is launched (write-ahead). After a FICC
restart, an attempt with a recorded process is fenced (killed by pid and start time) and one
without is *unknown*. Every state change goes through the domain's tables: ``apply_event`` for
services, ``next_attempt_state`` for attempts, ``plan_operation`` for the shutdown's stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ficc.base.errors import Conflict, FiccError, RuntimeNotInstalled
from ficc.domain.inference import (
    AttemptEvent,
    AttemptState,
    Operation,
    RuntimeName,
    ServiceEvent,
    ServiceState,
    admits_requests,
    apply_event,
    next_attempt_state,
    plan_operation,
    recovery_event,
)
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services.inference.records import AttemptFence, node_info
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.runtimes import LaunchRequest, ProcessIdentity, ReplicaHandle, Runtime

log = logging.getLogger("ficc.inference")


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
        start_timeout_seconds: float,
        stop_grace_seconds: float,
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
        self._router.forget(service_id)

    def tracked_services(self) -> frozenset[str]:
        """The service IDs any per-service map holds; bounded by the services that exist."""
        return frozenset(
            {*self._handles, *self._stopping, *self._locks, *self._router.tracked_services()}
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
                        await self.runtime(service.spec.runtime).fence(
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
        """At a clean shutdown: stop every engine and record the services as stopped."""
        self._router.close_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for service_id in list(self._handles):
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
    ) -> None:
        """Launch the recorded attempts, then wait for every replica to answer its health."""
        runtime = self.runtime(service.spec.runtime)
        handles: list[ReplicaHandle] = []
        self._router.close(service.id)
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
                    await self._service_event(service.id, ServiceEvent.LAUNCH_FAILED, exc.message)
                    await self.stop_replicas(service.id)
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
                tail = "\n".join(runtime.log_tail(handle))
                await self._attempt_event(handle.attempt_id, AttemptEvent.LAUNCH_FAILED, tail)
                await self._service_event(
                    service.id, ServiceEvent.LAUNCH_FAILED, health.reason or "engine not ready"
                )
                await self.stop_replicas(service.id)
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

    async def _watch(self, service_id: str, runtime: Runtime, handle: ReplicaHandle) -> None:
        ended = await runtime.wait_exited(handle)
        if service_id in self._stopping or handle not in self._handles.get(service_id, []):
            return
        self._router.close(service_id)
        tail = "\n".join(ended.log_tail or runtime.log_tail(handle))
        await self._attempt_event(handle.attempt_id, AttemptEvent.CRASHED, tail, ended.exit_code)
        await self._service_event(service_id, ServiceEvent.CRASHED, ended.describe())
        await self.stop_replicas(service_id)

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
            await uow.services.update(
                replace(
                    service,
                    state=state,
                    error=error if state is ServiceState.FAILED else service.error,
                    updated_at=self._clock(),
                )
            )
            await uow.commit()
            if admits_requests(state) and ready:
                self._router.open(
                    service_id, service.project, service.spec.runtime, ready, service.spec.options
                )
