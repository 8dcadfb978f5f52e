"""Supervision of engine replicas: launch, watch, restart, drain, stop, and FICC's own restart.

Every replica attempt is recorded before its engine is launched (write-ahead,
:mod:`.attempts`). An engine that ends by itself is started again as its service's restart
policy says (:mod:`.restarts`), once every replica of the service has ended. Every state change
goes through the domain's tables: ``apply_event`` for services, ``next_attempt_state`` for
attempts, ``plan_action`` for the shutdown's stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ficc.base.errors import FiccError, RuntimeNotInstalled
from ficc.domain.inference import (
    AttemptEvent,
    AttemptState,
    ControlAction,
    RuntimeName,
    ServiceEvent,
    ServiceState,
    admits_requests,
    apply_event,
    plan_action,
)
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.services.inference.attempts import AttemptLog, recover_attempts
from ficc.services.inference.background import BackgroundTasks
from ficc.services.inference.records import AttemptFence, node_info
from ficc.services.inference.restarts import Backoff, Restarts, Supervision
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.ports.runtimes import LaunchRequest, ReplicaAdopter, ReplicaHandle, Runtime


@dataclass(eq=False)
class ReplicaSupervisor:
    """Owns the replica handles, the background tasks and the per-service locks."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    _runtimes: Mapping[RuntimeName, Runtime]
    router: InvocationRouter
    fence_attempt: AttemptFence
    supervision: Supervision
    _handles: dict[str, list[ReplicaHandle]] = field(default_factory=dict, init=False, repr=False)
    _stopping: set[str] = field(default_factory=set, init=False, repr=False)
    _tasks: BackgroundTasks = field(default_factory=BackgroundTasks, init=False, repr=False)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, init=False, repr=False)
    _attempts: AttemptLog = field(init=False, repr=False)
    _restarts: Restarts = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._attempts = AttemptLog(self.uow_factory, self.clock)
        self._restarts = Restarts(self.uow_factory, self.clock, self.supervision)

    def runtime(self, name: RuntimeName) -> Runtime:
        """The installed runtime ``name``; RuntimeNotInstalled when this cluster has none."""
        runtime = self._runtimes.get(name)
        if runtime is None:
            raise RuntimeNotInstalled.of(name.value)
        return runtime

    def runtimes_by_name(self) -> Mapping[RuntimeName, Runtime]:
        """The installed runtimes by name, for what only some can do (adopt replicas)."""
        return self._runtimes

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
        async with self.uow_factory() as uow:
            if await uow.services.get(service_id) is None:
                return None
        return self._locks.setdefault(service_id, asyncio.Lock())

    def forget(self, service_id: str) -> None:
        """A removed service leaves nothing behind; its caller holds (and drops) its lock."""
        self._locks.pop(service_id, None)
        self._stopping.discard(service_id)
        self._restarts.forget(service_id)
        self.router.forget(service_id)

    def tracked_services(self) -> frozenset[str]:
        """The service IDs any per-service map holds; bounded by the services that exist."""
        return frozenset(
            {
                *self._handles,
                *self._stopping,
                *self._locks,
                *self._restarts.tracked_services(),
                *self.router.tracked_services(),
            }
        )

    async def release_unknown(self, attempts: list[AttemptRecord]) -> None:
        """Kill whatever an acknowledged unknown attempt may have left running."""
        for attempt in attempts:
            if attempt.state is AttemptState.UNKNOWN:
                await self.fence_attempt(attempt.id, self.supervision.stop_grace_seconds)

    # --- FICC's own lifecycle ----------------------------------------------------------------

    async def recover(self, adopted: frozenset[str] = frozenset()) -> None:
        """At start: nothing from an earlier FICC process is believed running but the replicas
        of the ``adopted`` services."""
        await recover_attempts(
            self.uow_factory,
            self.clock,
            self.runtime,
            self.supervision.stop_grace_seconds,
            keep=adopted,
        )

    def adopt(
        self,
        service: ServiceRecord,
        node: Node,
        model_path: Path | None,
        replicas: list[ReplicaHandle],
    ) -> None:
        """Supervise a running service's replicas that an earlier FICC process launched, as if
        this one had: watched, restarted after a crash, open to requests."""
        runtime = self.runtime(service.spec.runtime)
        self._handles[service.id] = replicas
        self._stopping.discard(service.id)
        self._restarts.launching(service.id, node, model_path, restarting=False)
        self._restarts.running(service.id, self.clock())
        for handle in replicas:
            self.spawn(self._watch(service.id, runtime, handle))
        self.router.open(
            service.id, service.project, service.spec.runtime, tuple(replicas), service.spec.options
        )

    async def close(self) -> None:
        """At a clean shutdown: stop every engine and record the services as stopped (those
        waiting out a restart's backoff too); their desired state stays."""
        self.router.close_all()
        await self._tasks.cancel_all()
        for service_id in sorted({*self._handles, *self._restarts.waiting()}):
            await self.stop_replicas(service_id)
            async with self.uow_factory() as uow:
                service = await uow.services.get(service_id)
                if service is not None:
                    state = plan_action(service.state, ControlAction.STOP).to_state
                    assert state is not None  # stop keeps the record
                    if state is not service.state:
                        await uow.services.update(
                            replace(service, state=state, updated_at=self.clock())
                        )
                await uow.commit()

    async def let_go(self) -> None:
        """After this process lost the active lease: end its engines and record nothing (the
        records are the new active's now; fencing their attempts finds them ended). Replicas
        that outlive this process are left running, for the new active to adopt or fence."""
        self.router.close_all()
        await self._tasks.cancel_all()
        for service_id in sorted(self._handles):
            self._stopping.add(service_id)
            for handle in self._handles.pop(service_id):
                runtime = self.runtime(handle.runtime)
                if isinstance(runtime, ReplicaAdopter):
                    await runtime.let_go(handle)
                else:
                    await runtime.stop(handle, self.supervision.stop_grace_seconds)

    # --- replicas ----------------------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background, kept (and cancelled at close) by the supervisor."""
        self._tasks.spawn(work)

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
        self.router.close(service.id)
        self._handles[service.id] = handles
        self._stopping.discard(service.id)
        self._restarts.launching(service.id, node, model_path, restarting=restarting)

        def superseded() -> bool:
            """A stop, a crash or a newer start has taken this launch's replicas away."""
            return self._handles.get(service.id) is not handles

        for index, attempt in enumerate(attempts):
            if superseded():
                await self._attempts.never_launched(attempts[index:])
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
                await self._attempts.event(attempt.id, AttemptEvent.LAUNCH_FAILED)
                await self._attempts.never_launched(attempts[index + 1 :])
                if not superseded():
                    await self._launch_failed(service.id, exc.message, restarting)
                return
            await self._attempts.launched(attempt.id, handle)
            if superseded():
                # Stopped while this engine was being launched: end it here, or nobody will.
                await self._end_replica(handle)
                await self._attempts.never_launched(attempts[index + 1 :])
                return
            handles.append(handle)
            self.spawn(self._watch(service.id, runtime, handle))
        for handle in list(handles):
            health = await runtime.wait_ready(handle, self.supervision.start_timeout_seconds)
            if superseded():
                return
            if not health.healthy:
                claimed = self._claim(service.id)  # before any await: no watch takes it too
                tail = "\n".join(runtime.log_tail(handle))
                await self._attempts.event(handle.attempt_id, AttemptEvent.LAUNCH_FAILED, tail)
                await self._launch_failed(
                    service.id, health.reason or "engine not ready", restarting, claimed
                )
                return
            await self._attempts.event(handle.attempt_id, AttemptEvent.HEALTHY)
        if not superseded():
            await self._service_event(service.id, ServiceEvent.READY, None, tuple(handles))

    def _claim(self, service_id: str) -> list[ReplicaHandle]:
        """Take a service's replicas away from every other path, without awaiting anything:
        the one path that claims them ends them and decides what the service becomes."""
        self._stopping.add(service_id)
        self.router.close(service_id)
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
        await self._attempts.event(handle.attempt_id, AttemptEvent.CRASHED, tail, ended.exit_code)
        for other in handles:
            await self._end_replica(other)  # the crashed one too: its runtime lets go of it
        clean = ended.exit_code == 0 and ended.signal is None and ended.reason is None
        await self._ended_by_itself(service_id, ended.describe(), clean_exit=clean)

    async def _ended_by_itself(
        self, service_id: str, description: str, *, clean_exit: bool
    ) -> None:
        """Every replica of a service has ended after one ended without being asked: start it
        again after the backoff, or record it ``failed`` (policy, crash loop, lapsed grant)."""
        backoff = await self._restarts.ended_by_itself(
            service_id, description, clean_exit=clean_exit
        )
        if backoff is not None:
            self.spawn(self._restart_later(service_id, backoff))

    async def _restart_later(self, service_id: str, backoff: Backoff) -> None:
        """After the backoff, start the service again, unless someone changed it meanwhile."""
        await asyncio.sleep(backoff.delay_seconds)
        self._restarts.waited(service_id)
        lock = await self.lock_of(service_id)
        launch = self._restarts.last_launch(service_id)
        if lock is None or launch is None:
            return
        async with lock:
            restart = await self._restarts.record_restart(
                service_id, backoff, lambda: service_id in self._handles
            )
            if restart is None:
                return
            service, attempts = restart
            node, model_path = launch
            self.spawn(self.launch(service, node, model_path, attempts, restarting=True))

    def drain(self, service_id: str) -> None:
        """Stop the replicas once the requests in flight have ended (in the background)."""
        self.spawn(self._finish_drain(service_id))

    async def _finish_drain(self, service_id: str) -> None:
        handles = self._handles.get(service_id)
        await self.router.idle(service_id)
        if handles is not None and self._handles.get(service_id) is not handles:
            return  # stopped, crashed or started again meanwhile: not this drain's replicas
        await self.stop_replicas(service_id)
        await self._service_event(service_id, ServiceEvent.DRAINED, None)

    async def stop_replicas(self, service_id: str) -> None:
        """End every replica of ``service_id``; a launch in progress ends its own."""
        # Marked even when no replica is known yet: a launch in progress sees it is superseded
        # and ends the engine it is starting itself.
        self._stopping.add(service_id)
        self.router.close(service_id)
        handles = list(self._handles.pop(service_id, []))
        for handle in handles:
            await self._end_replica(handle)

    async def _end_replica(self, handle: ReplicaHandle) -> None:
        runtime = self.runtime(handle.runtime)
        await self._attempts.event(handle.attempt_id, AttemptEvent.STOP)
        ended = await runtime.stop(handle, self.supervision.stop_grace_seconds)
        await self._attempts.event(handle.attempt_id, AttemptEvent.EXITED, None, ended.exit_code)

    # --- records -----------------------------------------------------------------------------

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
        async with self.uow_factory() as uow:
            service = await uow.services.get(service_id)
            if service is None:
                return
            state = apply_event(service.state, event)
            if state is service.state:
                return
            if not admits_requests(state):
                self.router.close(service_id)
            if state is ServiceState.FAILED:
                shown = error
            elif state is ServiceState.RUNNING:
                shown = None  # a restart's reason is kept in the audit log, not here
            else:
                shown = service.error
            now = self.clock()
            await uow.services.update(replace(service, state=state, error=shown, updated_at=now))
            await uow.commit()
            if state is ServiceState.RUNNING:
                self._restarts.running(service_id, now)
            if admits_requests(state) and ready:
                self.router.open(
                    service_id, service.project, service.spec.runtime, ready, service.spec.options
                )
