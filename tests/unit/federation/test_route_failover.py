"""A route across two in-process clusters: the grantor's real gate says when it refused a
request before admitting it, and only then does the requester's route try its next target."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.fakes.peer_channel import OWNER, Pair, paired
from tests.support.isolation import add_node, record_model

from ficc.base.errors import LimitExceeded
from ficc.bootstrap import Cluster
from ficc.domain.inference import ServiceState
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH
from ficc.domain.routes import Outcome, Route
from ficc.services.inference import Actor
from ficc.services.inference.route_targets import Ask
from ficc.services.inference.routes import RouteTrace

BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def running_service(cluster: Cluster) -> str:
    node = await add_node(cluster)
    model = await record_model(cluster, "default", [1024], owned=True)
    spec = {"name": "svc", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    commands = cluster.inference.commands
    view, _ = await commands.create_service(Actor("owner:test"), "default", spec)
    await commands.control_service(
        Actor("owner:test"), "default", view["id"], revision=view["revision"], operation="start"
    )
    for _ in range(1000):
        async with cluster.uow_factory() as uow:
            record = await uow.services.get(view["id"])
        if record is not None and record.state is ServiceState.RUNNING:
            return str(view["id"])
        await asyncio.sleep(0)
    raise AssertionError("the service never ran")


async def routed(pair: Pair, **grant: Any) -> tuple[Route, str, str, str]:
    """A route on the requester: the grantor's service first, then a local one."""
    remote_service = await running_service(pair.grantor)
    local_service = await running_service(pair.requester)
    finished = await paired(
        pair, {"scopes": ["inference:invoke"], "services": [remote_service], **grant}
    )
    peer = str(finished.peer.id)
    made = await pair.requester.routes.create_route(
        "default",
        {
            "name": "chat",
            "policy": "priority",
            "targets": [{"peer": peer, "service": remote_service}, {"service": local_service}],
        },
    )
    route = await pair.requester.routes.find("default", made["id"])
    assert route is not None
    return route, peer, remote_service, local_service


async def ask(pair: Pair, route: Route) -> RouteTrace:
    trace = RouteTrace(route.name)
    await pair.requester.routes.complete(
        Ask(OWNER, "default", route, CHAT_COMPLETIONS_PATH, BODY), trace
    )
    return trace


async def test_a_grant_whose_requests_are_used_up_moves_the_route_to_its_next_target(
    pair: Pair,
) -> None:
    route, peer, remote_service, local_service = await routed(pair, requests=1)
    first = await ask(pair, route)
    assert (first.target, first.skipped) == (f"{peer}/{remote_service}", [])
    second = await ask(pair, route)
    assert second.target == local_service
    assert second.skipped == [(f"{peer}/{remote_service}", Outcome.LIMIT_EXCEEDED)]


async def test_a_token_budget_too_small_for_the_request_moves_the_route_on(pair: Pair) -> None:
    """The grantor reserves a request's tokens before any engine work: its refusal proves
    nothing ran, so the route tries its next target (the issue names token budgets)."""
    route, peer, remote_service, local_service = await routed(pair, tokens=3)
    trace = await ask(pair, route)
    assert trace.target == local_service
    assert trace.skipped == [(f"{peer}/{remote_service}", Outcome.LIMIT_EXCEEDED)]


async def test_the_gate_marks_its_refusals_as_made_at_admission(pair: Pair) -> None:
    route, peer, remote_service, _ = await routed(pair, requests=1)
    await ask(pair, route)
    with pytest.raises(LimitExceeded) as refused:
        await pair.requester.remote.request(
            OWNER,
            "default",
            peer,
            operation="inference.invoke",
            body={"service": remote_service, "path": CHAT_COMPLETIONS_PATH, "body": BODY},
        )
    assert refused.value.details["stage"] == "admission"


async def test_a_revoked_grant_moves_the_route_to_its_next_target(pair: Pair) -> None:
    route, peer, remote_service, local_service = await routed(pair)
    [grant] = await _grants(pair.grantor)
    await pair.grantor.federation.grants.revoke_grant(OWNER, "default", grant)
    trace = await ask(pair, route)
    assert trace.target == local_service
    [(target, outcome)] = trace.skipped
    assert target == f"{peer}/{remote_service}"
    # Told by the grantor's notice (nothing sent) or by its gate: either way nothing ran.
    assert outcome in (Outcome.NOT_SENT, Outcome.GRANT_REVOKED)


async def _grants(cluster: Cluster) -> list[str]:
    async with cluster.uow_factory() as uow:
        return [grant.id for grant in await uow.grants.in_project("default")]
