"""Routes: a project's model name that tries its targets, local services and peers' granted
services, in its policy's order, and moves on only where the request provably did not start.

A local target is skipped when it has no ready replica or is at its concurrency (decided from
the router's memory, then called with no wait in between, so the count is exact); a remote one
when this cluster refuses it before sending (no pairing, no selected grant, the service not
published, the body over the grant's ``request_bytes``), when its circuit is open, when the
peer was unreachable before the request went out, or when the grantor's gate refused it
(:func:`ficc.domain.routes.skip_outcome`). Once a target accepted a request its answer, or
its error, is the answer: nothing is replayed. Each target's own grant, scope and limits apply
to what it serves; a local target needs ``inference:invoke``, a remote one
``federation:invoke``.

A remote target whose grantor last said a budget or a window of its grant is spent (the
counts told at the end of each answer) is skipped before anything is sent; the hook
:data:`TargetAdmission` may add checks of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, Final, TypeVar

from ficc.base.errors import (
    Conflict,
    FiccError,
    InvalidInput,
    NotFound,
)
from ficc.base.ids import PREFIXES, new_id
from ficc.domain.openai_responses import check_invocation
from ficc.domain.routes import (
    Breaker,
    Outcome,
    Route,
    Target,
    order,
    parse_route_spec,
)
from ficc.services.inference.invoke import Invocations
from ficc.services.inference.route_targets import (
    Ask,
    RouteTargets,
    Skip,
    TargetAdmission,
    addressed_to,
    always,
    token_admits,
)
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import Clock, RemoteInvoker, UnitOfWork, UnitOfWorkFactory
from ficc.services.token_limits import TokenLimits

ROUTE_ID_PREFIX: Final = PREFIXES["route"] + "_"

_A = TypeVar("_A")


OutcomeCounter = Callable[[str, str, Outcome], None]
"""``count(route_name, target_label, outcome)``: ``ficc_route_requests_total``."""


def _uncounted(route: str, target: str, outcome: Outcome) -> None:
    return None


@dataclass
class RouteTrace:
    """What one request through a route did: the target that answered, and each target
    skipped with why (for the answer's header and the access log)."""

    route: str
    target: str | None = None
    skipped: list[tuple[str, Outcome]] = field(default_factory=list)

    def log_fields(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "route_target": self.target,
            "route_skipped": [{"target": t, "outcome": o.value} for t, o in self.skipped],
        }


@dataclass(eq=False)
class Routes:
    """Route records (create, read, replace, remove) and invocations through them."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    router: InitVar[InvocationRouter]
    invocations: Invocations
    remote: RemoteInvoker
    _: KW_ONLY
    monotonic: InitVar[Callable[[], float] | None] = None
    admit_target: InitVar[TargetAdmission] = always
    count: OutcomeCounter = _uncounted
    tokens: TokenLimits | None = None
    _targets: RouteTargets = field(init=False, repr=False)
    _cache: dict[str, dict[str, Route]] = field(default_factory=dict, init=False, repr=False)
    """By project: its routes by ID and by name, loaded once (every change goes here)."""

    def __post_init__(
        self,
        router: InvocationRouter,
        monotonic: Callable[[], float] | None,
        admit_target: TargetAdmission,
    ) -> None:
        self._targets = RouteTargets(
            router,
            self.remote,
            monotonic=monotonic or (lambda: asyncio.get_running_loop().time()),
            admit_target=admit_target,
        )

    # --- the records --------------------------------------------------------------------------

    async def list_routes(self, project: str) -> list[dict[str, Any]]:
        async with self.uow_factory() as uow:
            return [route.to_json() for route in await uow.routes.list(project)]

    async def get_route(self, project: str, route_id: str) -> dict[str, Any]:
        return (await self._load(project, route_id)).to_json()

    async def create_route(self, project: str, data: object) -> dict[str, Any]:
        spec = parse_route_spec(data)
        _check_name(spec.name)
        now = self.clock()
        route = Route(new_id("route", secrets.token_bytes(16)), project, spec, now, now)
        async with self.uow_factory() as uow:
            if await uow.routes.by_name(project, spec.name) is not None:
                raise _name_taken(spec.name)
            await uow.routes.add(route)
            await uow.commit()
        self._cache.pop(project, None)
        return route.to_json()

    async def replace_route(self, project: str, route_id: str, data: object) -> dict[str, Any]:
        spec = parse_route_spec(data)
        _check_name(spec.name)
        async with self.uow_factory() as uow:
            route = await _project_route(uow, project, route_id)
            other = await uow.routes.by_name(project, spec.name)
            if other is not None and other.id != route_id:
                raise _name_taken(spec.name)
            route = route.replaced(spec, self.clock())
            await uow.routes.update(route)
            await uow.commit()
        self._cache.pop(project, None)
        return route.to_json()

    async def remove_route(self, project: str, route_id: str) -> None:
        async with self.uow_factory() as uow:
            await _project_route(uow, project, route_id)
            await uow.routes.delete(route_id)
            await uow.commit()
        self._cache.pop(project, None)

    async def find(self, project: str, model: str) -> Route | None:
        """The route of ``project`` whose ID or name is ``model``, from memory once loaded."""
        return (await self._known(project)).get(model)

    async def routes(self, project: str) -> list[Route]:
        """The project's routes by name, from memory once loaded."""
        known = await self._known(project)
        return sorted({r.id: r for r in known.values()}.values(), key=lambda r: r.name)

    async def _known(self, project: str) -> dict[str, Route]:
        routes = self._cache.get(project)
        if routes is None:
            async with self.uow_factory() as uow:
                listed = await uow.routes.list(project)
            routes = {key: r for r in listed for key in (r.id, r.name)}
            self._cache[project] = routes
        return routes

    async def _load(self, project: str, route_id: str) -> Route:
        async with self.uow_factory() as uow:
            return await _project_route(uow, project, route_id)

    # --- invocations --------------------------------------------------------------------------

    async def complete(self, ask: Ask, trace: RouteTrace) -> dict[str, Any]:
        """The plain answer of the first target, in the policy's order, that accepts it."""
        check_invocation(ask.path, ask.body)

        async def attempt(target: Target, queue: bool) -> dict[str, Any]:
            return await self._complete_at(ask, target, queue)

        return await self._first(ask, trace, attempt)

    @contextlib.asynccontextmanager
    async def stream(self, ask: Ask, trace: RouteTrace) -> AsyncIterator[AsyncIterator[bytes]]:
        """The stream of the first target that accepts it (a remote one once its first chunk
        came: until then a refusal is still the gate's); leaving the block cancels it."""
        check_invocation(ask.path, ask.body)

        async def attempt(
            target: Target, queue: bool
        ) -> tuple[contextlib.AsyncExitStack, AsyncIterator[bytes]]:
            stack = contextlib.AsyncExitStack()
            try:
                chunks = await self._stream_at(stack, ask, target, queue)
            except BaseException:
                await stack.aclose()
                raise
            return stack, chunks

        stack, chunks = await self._first(ask, trace, attempt)
        async with stack:
            yield chunks

    async def _first(
        self, ask: Ask, trace: RouteTrace, attempt: Callable[[Target, bool], Awaitable[_A]]
    ) -> _A:
        """The first target's answer, in the policy's order, that ``attempt`` does not skip
        (``attempt(target, queue)``, which leaves nothing open when it raises)."""
        route = ask.route
        last: FiccError | None = None
        busy: list[Target] = []
        for target, queue in self._plan(ask.project, route, busy):
            try:
                token_admits(ask.principal, route, target)
                answer = await attempt(target, queue)
            except Skip as skip:
                self._skipped(route, target, skip.outcome, trace, busy)
                last = skip.error
                continue
            except FiccError:
                self._answered(route, target, Outcome.ERROR, trace)
                raise
            self._answered(route, target, Outcome.OK, trace)
            return answer
        raise _all_skipped(route, trace, last)

    def _plan(
        self, project: str, route: Route, busy: list[Target]
    ) -> Iterator[tuple[Target, bool]]:
        """Each target in the policy's order; then, if every one was skipped and a local one
        only for its implicit concurrency (one request per llama.cpp replica), that one again
        to queue there, as a call straight to it would (``busy`` fills as targets are skipped).
        A target's own ``max_in_flight`` is a bound, never queued past."""
        for target in self._ordered(project, route):
            yield target, False
        if busy:
            yield busy[0], True

    def _ordered(self, project: str, route: Route) -> list[Target]:
        targets = route.spec.targets
        free = [self._targets.free(project, target) for target in targets]
        return [targets[i] for i in order(route.spec.policy, targets, free)]

    # --- one target ---------------------------------------------------------------------------

    async def _complete_at(self, ask: Ask, target: Target, queue: bool) -> dict[str, Any]:
        principal, project, path = ask.principal, ask.project, ask.path
        if target.local:
            self._targets.local_admits(principal, project, target, queue=queue)
            # Nothing waits between the count above and the router's own count (a
            # restricted token's reservation comes first: a refusal of it is the answer).
            addressed = addressed_to(ask.body, target)
            if self.tokens is not None and principal.restrictions is not None:
                return await self.tokens.local(
                    principal,
                    target.service,
                    path,
                    addressed,
                    lambda sent: self.invocations.complete(project, target.service, path, sent),
                )
            return await self.invocations.complete(project, target.service, path, addressed)
        key, prepared, breaker = await self._targets.remote_admits(ask, target)
        with self._targets.sent(target, breaker), self._targets.counted(key):
            answer = await self.remote.send(prepared)
        result: dict[str, Any] = answer["result"]
        return result

    async def _stream_at(
        self, stack: contextlib.AsyncExitStack, ask: Ask, target: Target, queue: bool
    ) -> AsyncIterator[bytes]:
        principal, project, path = ask.principal, ask.project, ask.path
        if target.local:
            self._targets.local_admits(principal, project, target, queue=queue)
            addressed = addressed_to(ask.body, target)
            if self.tokens is not None and principal.restrictions is not None:
                return await stack.enter_async_context(
                    self.tokens.local_stream(
                        principal,
                        target.service,
                        path,
                        addressed,
                        lambda sent: self.invocations.stream(project, target.service, path, sent),
                    )
                )
            return await stack.enter_async_context(
                self.invocations.stream(project, target.service, path, addressed)
            )
        key, prepared, breaker = await self._targets.remote_admits(ask, target)
        stack.enter_context(self._targets.counted(key))
        with self._targets.sent(target, breaker):
            chunks = await stack.enter_async_context(self.remote.stream(prepared))
        return chunks

    def _skipped(
        self,
        route: Route,
        target: Target,
        outcome: Outcome,
        trace: RouteTrace,
        busy: list[Target],
    ) -> None:
        trace.skipped.append((target.label, outcome))
        self.count(route.name, target.label, outcome)
        if outcome is Outcome.BUSY and target.local and target.max_in_flight is None:
            busy.append(target)

    def _answered(self, route: Route, target: Target, outcome: Outcome, trace: RouteTrace) -> None:
        trace.target = target.label
        self.count(route.name, target.label, outcome)

    def breaker(self, project: str, label: str) -> Breaker | None:
        """The circuit breaker of a target (None before it was tried): for the console."""
        return self._targets.breaker(project, label)


def _all_skipped(route: Route, trace: RouteTrace, last: FiccError | None) -> FiccError:
    """Every target was skipped: the last refusal, naming the route and each skip."""
    error = last or Conflict(f"route {route.name} has no target to try")
    error.details["route"] = route.id
    error.details["skipped"] = trace.log_fields()["route_skipped"]
    return error


def _check_name(name: str) -> None:
    if name.startswith((PREFIXES["service"] + "_", ROUTE_ID_PREFIX)):
        raise InvalidInput(
            "name must not look like a service or route ID (it is used as a model name)",
            field="name",
        )


def _name_taken(name: str) -> Conflict:
    return Conflict(f"a route named {name} exists in this project", details={"field": "name"})


async def _project_route(uow: UnitOfWork, project: str, route_id: str) -> Route:
    """The project's route ``route_id``; another project's is not found, as a missing one."""
    route = await uow.routes.get(route_id)
    if route is None or route.project != project:
        raise NotFound(f"no route {route_id} in this project", details={"route": route_id})
    return route
