"""Invocation routing: which replica answers, and how many requests are in flight.

The router admits a request from memory only while the replicas the supervisor saw become
ready are published here (:meth:`InvocationRouter.open`); the supervisor closes them on every
stop, crash, drain or new start. Otherwise the database is read, as the authority, to refuse
with the service's state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from ficc.base.errors import Conflict
from ficc.base.json_types import JSONObject
from ficc.domain.inference import RuntimeName, admits_requests
from ficc.domain.service_records import ServiceRecord
from ficc.services.inference.records import Endpoint, load_service
from ficc.services.ports import EngineConnector, EngineStream, UnitOfWorkFactory
from ficc.services.ports.runtimes import ReplicaHandle


@dataclass(frozen=True)
class _ReadyService:
    """A service this process saw become ready, the replicas it became ready with, and its
    spec's runtime and options (a spec changes only while the service is stopped)."""

    project: str
    runtime: RuntimeName
    handles: tuple[ReplicaHandle, ...]
    options: Mapping[str, object]


@dataclass(frozen=True)
class Occupancy:
    """How full an admitted service is: what a route's choice of target reads."""

    runtime: RuntimeName
    replicas: int
    in_flight: int


class InvocationRouter:
    """Owns admission of requests, the round robin over replicas and the in-flight counts."""

    def __init__(self, uow_factory: UnitOfWorkFactory, engines: EngineConnector) -> None:
        self._uow_factory = uow_factory
        self.engines = engines
        self._admitting: dict[str, _ReadyService] = {}
        self._next_replica: dict[str, int] = {}
        self._in_flight: dict[str, int] = {}
        self._idle: dict[str, asyncio.Event] = {}

    def open(
        self,
        service_id: str,
        project: str,
        runtime: RuntimeName,
        handles: tuple[ReplicaHandle, ...],
        options: Mapping[str, object],
    ) -> None:
        """Admit requests to ``handles``: the supervisor saw every one of them become ready."""
        self._admitting[service_id] = _ReadyService(project, runtime, handles, options)

    def close(self, service_id: str) -> None:
        """No new request for ``service_id`` from now on; requests in flight go on."""
        self._admitting.pop(service_id, None)

    def close_all(self) -> None:
        """At shutdown: nothing is admitted any more."""
        self._admitting.clear()

    def is_open(self, service_id: str) -> bool:
        """Whether requests to ``service_id`` are admitted now."""
        return service_id in self._admitting

    def forget(self, service_id: str) -> None:
        """A removed service leaves nothing behind in memory.

        The in-flight count stays while a request is still counted: its block ends and prunes.
        """
        self._admitting.pop(service_id, None)
        self._next_replica.pop(service_id, None)
        if not self._in_flight.get(service_id):
            self._in_flight.pop(service_id, None)
            self._idle.pop(service_id, None)

    def occupancy(self, project: str, service_id: str) -> Occupancy | None:
        """A service of ``project`` that admits requests now: its runtime, ready replicas and
        requests in flight; None when it admits none. From memory, no transaction."""
        ready = self._admitting.get(service_id)
        if ready is None or ready.project != project or not ready.handles:
            return None
        return Occupancy(ready.runtime, len(ready.handles), self._in_flight.get(service_id, 0))

    def tracked_services(self) -> frozenset[str]:
        """The service IDs any of the router's maps holds; bounded by the services that exist."""
        return frozenset({*self._admitting, *self._next_replica, *self._in_flight, *self._idle})

    async def endpoint(self, project: str, service_id: str) -> Endpoint:
        """Where a running service of ``project`` answers, with its runtime and options; refused
        unless it is running. Read from memory while the service is admitted."""
        ready = self._admitting.get(service_id)
        if ready is None or ready.project != project or not ready.handles:
            async with self._uow_factory() as uow:
                service = await load_service(uow, project, service_id)
            ready = self._admitting.get(service_id)
            if not admits_requests(service.state) or ready is None:
                raise Conflict(
                    f"service {service_id} is {service.state.value}; only a running service "
                    "takes requests",
                    details={"state": service.state.value},
                )
        handles = ready.handles
        replica = self._next_replica.get(service_id, 0) % len(handles)
        self._next_replica[service_id] = replica + 1
        handle = handles[replica]
        return Endpoint(
            service_id, handle.base_url, handle.model_name, ready.runtime, ready.options
        )

    @contextlib.asynccontextmanager
    async def in_flight(self, service_id: str) -> AsyncIterator[None]:
        """Count a request in flight, so a drain waits for it; the last one out prunes."""
        self._in_flight[service_id] = self._in_flight.get(service_id, 0) + 1
        self._idle.setdefault(service_id, asyncio.Event()).clear()
        try:
            yield
        finally:
            self._in_flight[service_id] -= 1
            if self._in_flight[service_id] == 0:
                del self._in_flight[service_id]
                self._idle.pop(service_id).set()

    async def idle(self, service_id: str) -> None:
        """Return once no request of ``service_id`` is in flight."""
        if self._in_flight.get(service_id, 0) == 0:
            return
        await self._idle[service_id].wait()

    @contextlib.asynccontextmanager
    async def stream(
        self, endpoint: Endpoint, path: str, body: Mapping[str, object]
    ) -> AsyncIterator[EngineStream]:
        """Open a streamed invocation of the replica :meth:`endpoint` chose, counted in flight
        (so :meth:`idle` waits for it); leaving the block closes it, which stops the engine."""
        async with self.in_flight(endpoint.service_id):
            stream = await self.engines.open_stream(endpoint, path, body)
            try:
                yield stream
            finally:
                await stream.aclose()

    async def complete(
        self,
        endpoint: Endpoint,
        path: str,
        body: Mapping[str, object],
        max_bytes: int | None,
    ) -> JSONObject:
        """A plain answer, generated in streaming mode so that cancelling this call stops it;
        counted in flight as :meth:`stream` is.

        ``max_bytes``: refused (LimitExceeded) as soon as the answer arriving would pass it
        (None: unbounded).
        """
        async with self.in_flight(endpoint.service_id):
            return await self.engines.complete(endpoint, path, body, max_bytes=max_bytes)

    async def running_services(self, project: str) -> list[ServiceRecord]:
        """The services of ``project`` that take requests now."""
        async with self._uow_factory() as uow:
            services = await uow.services.list(project)
        return [s for s in services if admits_requests(s.state) and self.is_open(s.id)]
