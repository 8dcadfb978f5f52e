"""One target of a route, tried: what skips it before anything is sent (the credential's
scope, a restricted token's rules, a local target's replicas and concurrency, a remote one's
breaker, grant, concurrency and known limits), and what sending tells its breaker.

A skip (:class:`Skip`) proves nothing was sent, so :mod:`ficc.services.inference.routes` may
move on to the next target; any other error is the answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final

from ficc.base.errors import Conflict, FiccError, LimitExceeded, PeerUnreachable, PermissionDenied
from ficc.domain import token_limits as tl
from ficc.domain.grants import DEFAULT_CONCURRENT, copied_term
from ficc.domain.inference import RuntimeName
from ficc.domain.operations import INVOKE
from ficc.domain.principals import Principal
from ficc.domain.routes import Breaker, Outcome, Route, Target, free_slots, local_skip, skip_outcome
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import RemoteInvoker
from ficc.services.token_limits import check_service

ONE_AT_A_TIME: Final = frozenset({RuntimeName.LLAMA_CPP})
"""Runtimes whose replica serves one request at a time (FICC runs llama.cpp's server so):
such a local target is at its concurrency with one request per ready replica in flight."""


TargetAdmission = Callable[[str, Target], Awaitable[Outcome | None]]
"""``check(project, target)`` before a remote target is tried: a skip (a peer's token budget
or rate window that would refuse, known from metering), or None to try it."""


async def always(project: str, target: Target) -> Outcome | None:
    return None


@dataclass(frozen=True)
class Ask:
    """One request through a route, as each of its targets is tried with it."""

    principal: Principal
    project: str
    route: Route
    path: str
    body: Mapping[str, Any]


@dataclass
class Skip(Exception):
    """A target skipped before anything was sent, with the error to answer if all are."""

    outcome: Outcome
    error: FiccError


@dataclass(eq=False)
class RouteTargets:
    """What trying a route's targets keeps: each remote target's breaker, its requests in
    flight and its grant's concurrency, as last prepared."""

    router: InvocationRouter
    remote: RemoteInvoker
    _: KW_ONLY
    monotonic: Callable[[], float]
    admit_target: TargetAdmission = always
    _breakers: dict[tuple[str, str], Breaker] = field(default_factory=dict, init=False)
    _remote_in_flight: dict[tuple[str, str], int] = field(default_factory=dict, init=False)
    _remote_caps: dict[tuple[str, str], int] = field(default_factory=dict, init=False)

    def free(self, project: str, target: Target) -> float:
        if target.local:
            occupancy = self.router.occupancy(project, target.service)
            if occupancy is None:
                return -float("inf")
            return free_slots(_local_capacity(target, occupancy), occupancy.in_flight)
        key = (project, target.label)
        cap = self._remote_caps.get(key, target.max_in_flight or DEFAULT_CONCURRENT)
        return free_slots(cap, self._remote_in_flight.get(key, 0))

    def local_admits(
        self, principal: Principal, project: str, target: Target, *, queue: bool = False
    ) -> None:
        """Skip a local target the credential may not invoke, or that would not start it
        (``queue``: past its implicit concurrency, as every other target was skipped)."""
        if "inference:invoke" not in principal.scopes:
            raise Skip(Outcome.FORBIDDEN, _missing_scope("inference:invoke"))
        occupancy = self.router.occupancy(project, target.service)
        outcome = local_skip(
            admitting=occupancy is not None,
            capacity=None if occupancy is None else _local_capacity(target, occupancy),
            in_flight=0 if occupancy is None else occupancy.in_flight,
        )
        if outcome is Outcome.NOT_RUNNING:
            raise Skip(
                outcome,
                Conflict(
                    f"service {target.service} has no ready replica",
                    details={"service": target.service},
                ),
            )
        if outcome is Outcome.BUSY and not queue:
            raise Skip(outcome, _busy(target))

    async def remote_admits(self, ask: Ask, target: Target) -> tuple[tuple[str, str], Any, Breaker]:
        """A remote target's request, prepared, once nothing before sending skips it; the
        breaker returned has admitted it (a probe, when half-open)."""
        assert target.peer is not None
        principal, project, path, route = ask.principal, ask.project, ask.path, ask.route
        if "federation:invoke" not in principal.scopes:
            raise Skip(Outcome.FORBIDDEN, _missing_scope("federation:invoke"))
        key = (project, target.label)
        breaker = self._breakers.setdefault(key, Breaker())
        if not breaker.admits(self.monotonic()):
            raise Skip(
                Outcome.CIRCUIT_OPEN,
                PeerUnreachable(
                    f"peer {target.peer} failed to connect; it is tried again later",
                    details={"peer": target.peer},
                ),
            )
        try:
            prepared = await self.remote.prepare(
                principal,
                project,
                target.peer,
                operation=INVOKE,
                body={
                    "service": target.service,
                    "path": path,
                    "body": addressed_to(ask.body, target),
                },
                service=target.service,
                via=(route.name, route.id),
            )
            cap = copied_term(prepared.terms, "concurrent", DEFAULT_CONCURRENT)
            if target.max_in_flight is not None:
                cap = min(cap, target.max_in_flight)
            self._remote_caps[key] = cap
            if self._remote_in_flight.get(key, 0) >= cap:
                raise Skip(Outcome.BUSY, _busy(target))
            spent = self.remote.known_refusal(prepared)
            if spent is not None:
                raise Skip(
                    Outcome.LIMIT_EXCEEDED,
                    LimitExceeded(
                        f"target {target.label}'s grant has its {spent} spent, as its "
                        "grantor last said",
                        details={"limit": spent, "target": target.label},
                    ),
                )
            outcome = await self.admit_target(project, target)
            if outcome is not None:
                raise Skip(
                    outcome,
                    LimitExceeded(
                        f"target {target.label} would refuse the request",
                        details={"limit": "route_target", "target": target.label},
                    ),
                )
        except Skip:
            breaker.released()
            raise
        except FiccError as exc:
            breaker.released()
            raise Skip(Outcome.NOT_SENT, exc) from exc
        except BaseException:
            breaker.released()
            raise
        return key, prepared, breaker

    @contextlib.contextmanager
    def sent(self, target: Target, breaker: Breaker) -> Iterator[None]:
        """What sending a remote target's request tells its breaker, and a refusal that proves
        nothing started turned into a skip; the same for a plain answer and a stream."""
        try:
            yield
        except FiccError as exc:
            if isinstance(exc, PeerUnreachable):
                breaker.failed(self.monotonic())
            else:
                breaker.answered()  # the peer answered, if only to refuse
            outcome = skip_outcome(target, exc)
            if outcome is not None:
                raise Skip(outcome, exc) from exc
            raise
        except BaseException:
            breaker.released()
            raise
        breaker.answered()

    @contextlib.contextmanager
    def counted(self, key: tuple[str, str]) -> Any:
        self._remote_in_flight[key] = self._remote_in_flight.get(key, 0) + 1
        try:
            yield
        finally:
            self._remote_in_flight[key] -= 1
            if not self._remote_in_flight[key]:
                del self._remote_in_flight[key]

    def breaker(self, project: str, label: str) -> Breaker | None:
        """The circuit breaker of a target (None before it was tried): for the console."""
        return self._breakers.get((project, label))


def token_admits(principal: Principal, route: Route, target: Target) -> None:
    """Skip a target a restricted token may not reach: its peer is not among the token's
    ``peers``, or neither its service nor the route (by name or ID) among its ``services``."""
    rules = principal.restrictions
    if rules is None:
        return
    try:
        if target.peer is not None and not rules.admits_peer(target.peer):
            raise tl.peer_refusal(target.peer)
        check_service(principal, target.service, route.name, route.id)
    except PermissionDenied as exc:
        raise Skip(Outcome.FORBIDDEN, exc) from exc


def _local_capacity(target: Target, occupancy: Any) -> int | None:
    """The most requests a local target takes at once: the target's own bound, else one per
    replica for a one-at-a-time runtime, else unbounded (the engine queues)."""
    if target.max_in_flight is not None:
        return int(target.max_in_flight)
    if occupancy.runtime in ONE_AT_A_TIME:
        return int(occupancy.replicas)
    return None


def addressed_to(body: Mapping[str, Any], target: Target) -> dict[str, Any]:
    """The caller's body with ``model`` naming the target's service."""
    return {**body, "model": target.service}


def _busy(target: Target) -> LimitExceeded:
    return LimitExceeded(
        f"target {target.label} is at its concurrency",
        details={"limit": "concurrent", "target": target.label},
    )


def _missing_scope(scope: str) -> PermissionDenied:
    return PermissionDenied(
        f"this credential lacks the scope {scope}", details={"missing_scope": scope}
    )
