"""Invocations through a route, over fakes: the policy's order, failover only where the request
provably did not start (the decision table against each kind of refusal), the breaker on the
loop's virtual clock, the target admission hook, and each outcome counted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.support.fakes.inference import Bench, bench
from tests.support.fakes.loop_clock import run_virtual
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.base.errors import (
    Conflict,
    EngineUnavailable,
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    LimitExceeded,
    NotFound,
    OutcomeUnknown,
    PeerUnreachable,
    PermissionDenied,
)
from ficc.base.units import MiB
from ficc.domain.inference import ServiceState
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH
from ficc.domain.principals import ALL_PROJECTS, Principal, owner_principal
from ficc.domain.routes import BREAKER_BASE_SECONDS, Outcome, Route, Target
from ficc.services.inference.route_targets import Ask
from ficc.services.inference.routes import Routes, RouteTrace

PROJECT = "default"
OWNER = owner_principal("usr_owner", "owner", via="socket")
PEER_A = "per_" + "a" * 26
PEER_B = "per_" + "b" * 26
REMOTE_SVC = "svc_" + "r" * 26
BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
ADMISSION = {"stage": "admission"}


@dataclass
class Prepared:
    peer: str
    body: dict[str, Any]
    terms: dict[str, Any]


@dataclass
class FakeRemote:
    """The requester's side, scripted per peer: what sending (or a stream) does."""

    fails: dict[str, FiccError] = field(default_factory=dict)
    """Per peer: the error sending raises (the answer's place)."""
    refuses: dict[str, FiccError] = field(default_factory=dict)
    """Per peer: the error this cluster's own checks raise before sending."""
    breaks_mid_stream: set[str] = field(default_factory=set)
    terms: dict[str, Any] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    release: asyncio.Event | None = None
    spent: dict[str, str] = field(default_factory=dict)
    """Per peer: the grant's rule its grantor last said is spent."""

    def known_refusal(self, prepared: Any) -> str | None:
        return self.spent.get(prepared.peer)

    async def prepare(
        self,
        principal: Principal,
        project: str,
        peer_id: str,
        *,
        operation: object,
        body: object,
        mutation_id: object = None,
        service: str | None = None,
        via: tuple[str, ...] = (),
    ) -> Prepared:
        assert operation == "inference.invoke"
        if peer_id in self.refuses:
            raise self.refuses[peer_id]
        assert isinstance(body, dict)
        return Prepared(peer_id, body, self.terms)

    async def send(self, prepared: Any) -> dict[str, Any]:
        self.sent.append(prepared.peer)
        if self.release is not None:
            await self.release.wait()
        if prepared.peer in self.fails:
            raise self.fails[prepared.peer]
        return {"result": {"object": "chat.completion", "served_by": prepared.peer}}

    @contextlib.asynccontextmanager
    async def stream(self, prepared: Any) -> AsyncIterator[AsyncIterator[bytes]]:
        self.sent.append(prepared.peer)
        if prepared.peer in self.fails:
            raise self.fails[prepared.peer]
        peer = prepared.peer
        broken = peer in self.breaks_mid_stream

        async def chunks() -> AsyncIterator[bytes]:
            yield b"data: " + peer.encode() + b"\n\n"
            if broken:
                raise EngineUnavailable("the engine failed mid-stream")
            yield b"data: [DONE]\n\n"

        yield chunks()


@dataclass
class Setup:
    bench: Bench
    routes: Routes
    remote: FakeRemote
    local: str
    counted: list[tuple[str, str, Outcome]]

    async def route(self, *targets: dict[str, Any], policy: str = "priority") -> Route:
        made = await self.routes.create_route(
            PROJECT, {"name": "chat", "policy": policy, "targets": list(targets)}
        )
        found = await self.routes.find(PROJECT, made["id"])
        assert found is not None
        return found

    async def ask(
        self, route: Route, principal: Principal = OWNER
    ) -> tuple[dict[str, Any], RouteTrace]:
        trace = RouteTrace(route.name)
        answer = await self.routes.complete(
            Ask(principal, PROJECT, route, CHAT_COMPLETIONS_PATH, BODY), trace
        )
        return answer, trace


async def make(tmp_path: Path, **routes_options: Any) -> Setup:
    b = bench(tmp_path)
    await b.add_node()
    model = await b.add_model(MiB)
    service = await b.create(model)
    await b.control(service["id"], "start")
    await b.until(lambda: b.service(service["id"]).state is ServiceState.RUNNING)
    remote = FakeRemote()
    counted: list[tuple[str, str, Outcome]] = []
    routes = Routes(
        FakeUnitOfWorkFactory(b.store),
        b.clock,
        b.services.router,
        b.services.invocations,
        remote,
        count=lambda *item: counted.append(item),
        **routes_options,
    )
    return Setup(b, routes, remote, str(service["id"]), counted)


def local(s: Setup, **extra: Any) -> dict[str, Any]:
    return {"service": s.local, **extra}


def remote(peer: str, **extra: Any) -> dict[str, Any]:
    return {"peer": peer, "service": REMOTE_SVC, **extra}


async def test_priority_answers_from_the_first_target_and_names_it(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s), remote(PEER_A))
    answer, trace = await s.ask(route)
    assert answer["text"] == "hello"
    assert (trace.target, trace.skipped) == (s.local, [])
    assert (len(s.bench.engine.calls), s.remote.sent) == (1, [])
    assert s.counted == [("chat", s.local, Outcome.OK)]


async def test_a_busy_local_service_overflows_to_the_peer_and_frees_again(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s), remote(PEER_A))
    s.bench.engine.release.clear()
    # One request in flight (llama.cpp: one at a time per replica), called directly.
    held = asyncio.create_task(
        s.bench.services.invocations.complete(PROJECT, s.local, CHAT_COMPLETIONS_PATH, BODY)
    )
    await s.bench.until(lambda: len(s.bench.engine.calls) == 1)
    answer, trace = await s.ask(route)
    assert answer["served_by"] == PEER_A
    assert trace.skipped == [(s.local, Outcome.BUSY)]
    assert trace.target == f"{PEER_A}/{REMOTE_SVC}"
    s.bench.engine.release.set()
    await held
    _, trace = await s.ask(route)
    assert trace.target == s.local


async def test_concurrent_requests_through_a_route_count_exactly(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s, max_in_flight=2), remote(PEER_A, max_in_flight=5))
    s.remote.terms = {"concurrent": 10}  # this cluster's copy of the grant
    s.bench.engine.release.clear()
    s.remote.release = asyncio.Event()
    asks = [asyncio.create_task(s.ask(route)) for _ in range(5)]
    await s.bench.until(lambda: len(s.bench.engine.calls) + len(s.remote.sent) == 5)
    assert (len(s.bench.engine.calls), len(s.remote.sent)) == (2, 3)
    s.bench.engine.release.set()
    s.remote.release.set()
    await asyncio.gather(*asks)


async def test_a_stopped_local_service_is_skipped_as_not_running(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s), remote(PEER_A))
    await s.bench.control(s.local, "stop")
    await s.bench.until(lambda: not s.bench.services.router.is_open(s.local))
    answer, trace = await s.ask(route)
    assert answer["served_by"] == PEER_A
    assert trace.skipped == [(s.local, Outcome.NOT_RUNNING)]


@pytest.mark.parametrize(
    ("error", "skipped"),
    [
        (PeerUnreachable("the request was not sent: no route to the peer"), "peer_unreachable"),
        (GrantRevoked("the grant was revoked", details=ADMISSION), "grant_revoked"),
        (GrantExpired("the grant expired", details=ADMISSION), "grant_expired"),
        (LimitExceeded("used up", details={"limit": "requests", **ADMISSION}), "limit_exceeded"),
        (LimitExceeded("tokens", details={"limit": "tokens", **ADMISSION}), "limit_exceeded"),
        (GrantRevoked("the grant was revoked; the peer ended the request"), None),
        (OutcomeUnknown("the outcome of inference.invoke is unknown"), None),
        (EngineUnavailable("the engine failed"), None),
        (LimitExceeded("too long", details={"limit": "response_bytes"}), None),
        (InvalidInput("temperature must be from 0 to 2", field="temperature"), None),
    ],
)
async def test_a_peers_refusal_moves_on_only_where_the_request_did_not_start(
    tmp_path: Path, error: FiccError, skipped: str | None
) -> None:
    s = await make(tmp_path)
    route = await s.route(remote(PEER_A), local(s))
    s.remote.fails[PEER_A] = error
    if skipped is None:
        with pytest.raises(type(error)):
            await s.ask(route)
        assert s.bench.engine.calls == []  # not replayed anywhere
        assert s.counted == [("chat", f"{PEER_A}/{REMOTE_SVC}", Outcome.ERROR)]
        return
    _, trace = await s.ask(route)
    assert trace.target == s.local
    assert trace.skipped == [(f"{PEER_A}/{REMOTE_SVC}", Outcome(skipped))]
    assert s.remote.sent == [PEER_A]


@pytest.mark.parametrize(
    "refusal",
    [
        Conflict("no grant of this peer is selected; refresh and select one"),
        NotFound("the model is not a service published by this peer's selected grant"),
        NotFound("no peer in project default"),
    ],
)
async def test_a_refusal_before_sending_moves_on_with_nothing_sent(
    tmp_path: Path, refusal: FiccError
) -> None:
    s = await make(tmp_path)
    route = await s.route(remote(PEER_A), remote(PEER_B))
    s.remote.refuses[PEER_A] = refusal
    answer, trace = await s.ask(route)
    assert answer["served_by"] == PEER_B
    assert trace.skipped == [(f"{PEER_A}/{REMOTE_SVC}", Outcome.NOT_SENT)]
    assert s.remote.sent == [PEER_B]


async def test_each_target_needs_its_own_scope(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(remote(PEER_A), local(s))
    local_only = Principal(
        "usr_x", "x", frozenset({"inference:invoke"}), frozenset({ALL_PROJECTS}), False, "token"
    )
    _, trace = await s.ask(route, local_only)
    assert trace.skipped == [(f"{PEER_A}/{REMOTE_SVC}", Outcome.FORBIDDEN)]
    assert s.remote.sent == []
    remote_only = Principal(
        "usr_y", "y", frozenset({"federation:invoke"}), frozenset({ALL_PROJECTS}), False, "token"
    )
    s.remote.fails[PEER_A] = PeerUnreachable("not sent")
    with pytest.raises(PermissionDenied) as refused:
        await s.ask(route, remote_only)
    assert refused.value.details["missing_scope"] == "inference:invoke"
    assert refused.value.details["skipped"] == [
        {"target": f"{PEER_A}/{REMOTE_SVC}", "outcome": "peer_unreachable"},
        {"target": s.local, "outcome": "forbidden"},
    ]


async def test_when_every_target_is_skipped_the_last_refusal_names_each_skip(
    tmp_path: Path,
) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s), remote(PEER_A))
    await s.bench.control(s.local, "stop")
    await s.bench.until(lambda: not s.bench.services.router.is_open(s.local))
    s.remote.fails[PEER_A] = GrantRevoked("the grant was revoked", details=ADMISSION)
    with pytest.raises(GrantRevoked) as refused:
        await s.ask(route)
    assert refused.value.details["route"] == route.id
    assert refused.value.details["skipped"] == [
        {"target": s.local, "outcome": "not_running"},
        {"target": f"{PEER_A}/{REMOTE_SVC}", "outcome": "grant_revoked"},
    ]


async def test_least_busy_takes_the_most_free_target_times_its_weight(tmp_path: Path) -> None:
    s = await make(tmp_path)
    # The local service takes one request at a time; the peer's grant two (the default).
    route = await s.route(local(s), remote(PEER_A), policy="least-busy")
    _, trace = await s.ask(route)
    assert trace.target == f"{PEER_A}/{REMOTE_SVC}"
    await s.routes.remove_route(PROJECT, route.id)
    route = await s.route(local(s, weight=3), remote(PEER_A), policy="least-busy")
    _, trace = await s.ask(route)
    assert trace.target == s.local


async def test_the_admission_hook_skips_a_target_before_anything_is_sent(tmp_path: Path) -> None:
    checked: list[str] = []

    async def spent(project: str, target: Target) -> Outcome | None:
        checked.append(target.label)
        return Outcome.LIMIT_EXCEEDED if target.peer == PEER_A else None

    s = await make(tmp_path, admit_target=spent)
    route = await s.route(remote(PEER_A), remote(PEER_B))
    answer, trace = await s.ask(route)
    assert answer["served_by"] == PEER_B
    assert trace.skipped == [(f"{PEER_A}/{REMOTE_SVC}", Outcome.LIMIT_EXCEEDED)]
    assert s.remote.sent == [PEER_B]
    assert checked == [f"{PEER_A}/{REMOTE_SVC}", f"{PEER_B}/{REMOTE_SVC}"]


async def test_a_target_whose_grantor_said_its_budget_is_spent_is_skipped_unsent(
    tmp_path: Path,
) -> None:
    s = await make(tmp_path)
    s.remote.spent[PEER_A] = "tokens"
    route = await s.route(remote(PEER_A), remote(PEER_B))
    answer, trace = await s.ask(route)
    assert answer["served_by"] == PEER_B
    assert trace.skipped == [(f"{PEER_A}/{REMOTE_SVC}", Outcome.LIMIT_EXCEEDED)]
    assert s.remote.sent == [PEER_B]


async def _stream(s: Setup, route: Route) -> tuple[list[bytes], RouteTrace]:
    trace = RouteTrace(route.name)
    body = {**BODY, "stream": True}
    got: list[bytes] = []
    async with s.routes.stream(
        Ask(OWNER, PROJECT, route, CHAT_COMPLETIONS_PATH, body), trace
    ) as it:
        async for chunk in it:
            got.append(chunk)
    return got, trace


async def test_a_stream_goes_to_the_first_target_that_accepts_it(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(remote(PEER_A), remote(PEER_B), local(s))
    s.remote.fails[PEER_A] = GrantExpired("the grant expired", details=ADMISSION)
    got, trace = await _stream(s, route)
    assert got == [b"data: " + PEER_B.encode() + b"\n\n", b"data: [DONE]\n\n"]
    assert trace.target == f"{PEER_B}/{REMOTE_SVC}"
    assert s.remote.sent == [PEER_A, PEER_B]


async def test_a_stream_that_failed_after_it_was_accepted_is_not_retried(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(remote(PEER_A), local(s))
    s.remote.breaks_mid_stream.add(PEER_A)
    with pytest.raises(EngineUnavailable):
        await _stream(s, route)
    assert s.remote.sent == [PEER_A]
    assert s.bench.engine.calls == []


async def test_a_local_stream_through_a_route_closes_the_engine_when_left(tmp_path: Path) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s))
    got, trace = await _stream(s, route)
    assert trace.target == s.local
    assert got
    assert s.bench.engine.streams[0].closed.is_set()


def test_a_peer_that_failed_to_connect_is_skipped_for_a_growing_interval(tmp_path: Path) -> None:
    """On the loop's virtual clock: one slow refusal, then skips until the interval passes,
    one probe, a longer interval, and closed again once the peer answers."""

    async def main() -> None:
        s = await make(tmp_path)
        route = await s.route(remote(PEER_A), local(s))
        s.remote.fails[PEER_A] = PeerUnreachable("could not reach the peer within 5.0 s")

        async def target() -> tuple[str | None, list[tuple[str, Outcome]]]:
            _, trace = await s.ask(route)
            return trace.target, trace.skipped

        label = f"{PEER_A}/{REMOTE_SVC}"
        assert await target() == (s.local, [(label, Outcome.PEER_UNREACHABLE)])
        assert await target() == (s.local, [(label, Outcome.CIRCUIT_OPEN)])
        await asyncio.sleep(BREAKER_BASE_SECONDS)
        assert await target() == (s.local, [(label, Outcome.PEER_UNREACHABLE)])  # the probe
        assert s.remote.sent == [PEER_A, PEER_A]
        await asyncio.sleep(BREAKER_BASE_SECONDS)  # the interval doubled
        assert await target() == (s.local, [(label, Outcome.CIRCUIT_OPEN)])
        await asyncio.sleep(BREAKER_BASE_SECONDS)
        del s.remote.fails[PEER_A]
        assert await target() == (label, [])
        assert await target() == (label, [])
        assert s.remote.sent == [PEER_A] * 4

    run_virtual(main())


async def test_a_route_is_found_by_name_or_id_and_refused_bad_input_names_the_field(
    tmp_path: Path,
) -> None:
    s = await make(tmp_path)
    route = await s.route(local(s))
    assert await s.routes.find(PROJECT, "chat") == route
    assert await s.routes.find(PROJECT, route.id) == route
    with pytest.raises(Conflict):
        await s.route(local(s))
    with pytest.raises(InvalidInput) as refused:
        await s.routes.create_route(
            PROJECT, {"name": s.local, "policy": "priority", "targets": [local(s)]}
        )
    assert refused.value.details["field"] == "name"
    replaced = await s.routes.replace_route(
        PROJECT, route.id, {"name": "renamed", "policy": "least-busy", "targets": [local(s)]}
    )
    assert replaced["id"] == route.id
    assert await s.routes.find(PROJECT, "chat") is None
    assert await s.routes.find(PROJECT, "renamed") is not None
    await s.routes.remove_route(PROJECT, route.id)
    assert await s.routes.find(PROJECT, "renamed") is None
    with pytest.raises(NotFound):
        await s.routes.get_route(PROJECT, route.id)


async def test_a_responses_request_goes_through_a_route_to_either_kind_of_target(
    tmp_path: Path,
) -> None:
    """Local: the Responses API as the chat request that answers it (llama.cpp has none);
    remote: one ``inference.invoke`` with the Responses path, the model the peer's service."""
    import json

    from ficc.domain.openai_responses import RESPONSES_PATH

    s = await make(tmp_path)
    chunk = {"id": "c", "created": 1, "model": "m"}
    s.bench.engine.chunks = [
        json.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": "ok"}}]}),
        json.dumps({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]
    route = await s.route(local(s), remote(PEER_A))
    body = {"model": "chat", "input": "Hi", "stream": True}
    trace = RouteTrace(route.name)
    async with s.routes.stream(Ask(OWNER, PROJECT, route, RESPONSES_PATH, body), trace) as chunks:
        sent = b"".join([piece async for piece in chunks])
    assert b"event: response.completed" in sent
    assert s.bench.engine.requests[-1][0] == CHAT_COMPLETIONS_PATH
    assert s.bench.engine.requests[-1][1]["model"] != "chat"
    await s.bench.control(s.local, "stop")
    await s.bench.until(lambda: not s.bench.services.router.is_open(s.local))
    prepared: list[dict[str, Any]] = []
    original = s.remote.prepare

    async def recorded(*args: Any, **kwargs: Any) -> Prepared:
        got = await original(*args, **kwargs)
        prepared.append(got.body)
        return got

    s.remote.prepare = recorded  # type: ignore[method-assign]
    trace = RouteTrace(route.name)
    plain = {"model": "chat", "input": "Hi"}
    await s.routes.complete(Ask(OWNER, PROJECT, route, RESPONSES_PATH, plain), trace)
    assert prepared == [
        {"service": REMOTE_SVC, "path": RESPONSES_PATH, "body": {**plain, "model": REMOTE_SVC}}
    ]
    with pytest.raises(InvalidInput):  # checked once, before any target
        await s.routes.complete(
            Ask(OWNER, PROJECT, route, RESPONSES_PATH, {"input": "Hi", "temperature": 9}), trace
        )


async def test_when_every_target_is_skipped_a_busy_local_service_queues_it_unless_bounded(
    tmp_path: Path,
) -> None:
    """A route refuses nothing a call straight to its local service would queue; a target's
    own ``max_in_flight`` is a bound: the route answers its last refusal instead."""
    s = await make(tmp_path)
    s.remote.fails[PEER_A] = GrantRevoked("the grant was revoked", details=ADMISSION)
    route = await s.route(local(s), remote(PEER_A))
    s.bench.engine.release.clear()
    held = asyncio.create_task(
        s.bench.services.invocations.complete(PROJECT, s.local, CHAT_COMPLETIONS_PATH, BODY)
    )
    await s.bench.until(lambda: len(s.bench.engine.calls) == 1)
    queued = asyncio.create_task(s.ask(route))
    await s.bench.until(lambda: len(s.bench.engine.calls) == 2)
    s.bench.engine.release.set()
    _, trace = await queued
    await held
    assert trace.target == s.local
    assert trace.skipped == [
        (s.local, Outcome.BUSY),
        (f"{PEER_A}/{REMOTE_SVC}", Outcome.GRANT_REVOKED),
    ]
    await s.routes.remove_route(PROJECT, route.id)
    bounded = await s.route(local(s, max_in_flight=1), remote(PEER_A))
    s.bench.engine.release.clear()
    held = asyncio.create_task(
        s.bench.services.invocations.complete(PROJECT, s.local, CHAT_COMPLETIONS_PATH, BODY)
    )
    await s.bench.until(lambda: len(s.bench.engine.calls) == 3)
    with pytest.raises(GrantRevoked):
        await s.ask(bounded)
    s.bench.engine.release.set()
    await held
    assert len(s.bench.engine.calls) == 3
