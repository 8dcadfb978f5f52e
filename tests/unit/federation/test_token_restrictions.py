"""One received grant shared inside the organization with restricted local tokens, between two
in-process clusters: each token stops at its own budget while the grant has room, a child
token never outspends its parent, a token held to one peer is refused another, and the usage
each token made sums to the grant's usage on the requester."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from tests.support.fakes.peer_channel import Pair
from tests.unit.federation.test_metered_grants import engine_of, invocation, metered, usage_of
from tests.unit.federation.test_usage_receipts import stored

from ficc.base.errors import InvalidInput, LimitExceeded, PermissionDenied
from ficc.base.ids import new_id
from ficc.bootstrap import Cluster
from ficc.domain import metering as m
from ficc.domain.principals import Principal
from ficc.web.app import create_app

INVOKERS = ["federation:invoke", "federation:read", "inference:invoke", "tokens:manage"]
PROMPT_BYTES = len("one two three")
"""What the requester reserves for the test's prompt: one token per byte (it cannot count)."""


async def owner_of(cluster: Cluster) -> Principal:
    return await cluster.accounts.tokens.authenticate_token(cluster.state.read_owner_token())


async def restricted(
    cluster: Cluster, creator: Principal | None = None, **rules: Any
) -> tuple[Principal, str, str]:
    """A token of ``cluster`` minted by ``creator`` (the owner) with ``rules``: its principal
    as a request authenticates it, its ID and its secret."""
    issued = await cluster.accounts.tokens.create_token(
        creator or await owner_of(cluster),
        scopes=rules.pop("scopes", INVOKERS),
        projects=["default"],
        lifetime=None,
        restrictions=rules,
    )
    principal = await cluster.accounts.tokens.authenticate_token(issued.token)
    return principal, issued.id, issued.token


async def ask(pair: Pair, principal: Principal, peer_id: str, service_id: str, **body: Any) -> None:
    await pair.requester.remote.request(
        principal,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, **{"max_tokens": 5, **body}),
    )


async def spend_until_refused(
    pair: Pair, principal: Principal, peer_id: str, service_id: str
) -> tuple[int, LimitExceeded]:
    """Requests until the token's rules refuse one: how many were answered, and the refusal."""
    for answered in range(100):
        try:
            await ask(pair, principal, peer_id, service_id)
        except LimitExceeded as exc:
            return answered, exc
    raise AssertionError("the token was never refused")


async def test_two_tokens_sharing_one_grant_each_stop_at_their_own_budget_while_the_grant_has_room(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=10_000)
    # Each answered request reserves its 13-byte prompt and max_tokens 5 and is settled to
    # the grantor's count, 3 tokens: a budget of 30 takes 6 before less than 14 is left.
    team_a, _, _ = await restricted(pair.requester, tokens=30)
    team_b, _, _ = await restricted(pair.requester, tokens=45)
    answered_a, refused_a = await spend_until_refused(pair, team_a, peer_id, service_id)
    answered_b, refused_b = await spend_until_refused(pair, team_b, peer_id, service_id)
    assert (answered_a, answered_b) == (6, 11)
    assert refused_a.details["limit"] == refused_b.details["limit"] == "token.tokens"
    assert refused_a.details["remaining"] == 30 - 3 * 6
    # The grant still has room: the owner's own requests go on.
    owner = await owner_of(pair.requester)
    await ask(pair, owner, peer_id, service_id)
    grantor, _ = await usage_of(pair, grant_id)
    assert grantor["totals"]["prompt_tokens"] == 3 * (6 + 11 + 1)


async def test_a_child_token_cannot_outspend_its_parent(pair: Pair) -> None:
    service_id, peer_id, _ = await metered(pair, tokens=10_000)
    parent, parent_id, _ = await restricted(pair.requester, tokens=40)
    # A child asking more than its parent may hold is refused, as a broader scope is.
    with pytest.raises(PermissionDenied) as broader:
        await restricted(pair.requester, parent, tokens=41)
    assert broader.value.details == {"field": "tokens", "restriction": "token.tokens"}
    # Two children, each as large as the parent: together they spend what the parent has.
    first, _, _ = await restricted(pair.requester, parent, tokens=40)
    second, second_id, _ = await restricted(pair.requester, parent)
    answered_first, _ = await spend_until_refused(pair, first, peer_id, service_id)
    answered_second, refused = await spend_until_refused(pair, second, peer_id, service_id)
    assert refused.details["limit"] == "token.tokens"
    # 40 holds 9 answers of 3 before less than 14 is left; the first child took them all.
    assert (answered_first, answered_second) == (9, 0)
    owner = await owner_of(pair.requester)
    listed = {t["id"]: t for t in await pair.requester.accounts.tokens.list_tokens(owner)}
    assert listed[parent_id]["remaining"]["tokens"] == 40 - 27
    assert listed[parent_id]["used"]["prompt_tokens"] == 27
    # The second child's own budget is its parent's: what the parent has left bounds it.
    assert listed[second_id]["remaining"]["tokens"] == 13
    assert listed[second_id]["tokens"] is None


async def test_concurrent_requests_of_one_token_never_pass_its_budget(pair: Pair) -> None:
    service_id, peer_id, _ = await metered(pair, tokens=10_000)
    team, team_id, _ = await restricted(pair.requester, tokens=50)
    engine = engine_of(pair)
    engine.release.clear()
    tasks = [asyncio.ensure_future(ask(pair, team, peer_id, service_id)) for _ in range(8)]
    for _ in range(200):
        await asyncio.sleep(0)
    engine.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    refused = [r for r in results if isinstance(r, LimitExceeded)]
    # 50 holds two reservations of 18 at once (the third finds 14 left, less than 18, and is
    # given 14: 13 of prompt and one of completion); the rest are refused naming the rule.
    assert len(refused) == 5
    assert {r.details["limit"] for r in refused} == {"token.tokens"}
    async with pair.requester.uow_factory() as uow:
        standing = await uow.token_limits.standing(team_id)
    assert standing is not None
    assert standing.tokens_reserved == 0
    assert standing.prompt_tokens_used + standing.completion_tokens_used == 9


async def test_a_token_restricted_to_one_peer_is_forbidden_another(pair: Pair) -> None:
    service_id, peer_id, _ = await metered(pair)
    async with pair.requester.uow_factory() as uow:
        real = await uow.peers.get(peer_id)
        assert real is not None
        other = replace(real, id=new_id("peer", secrets.token_bytes(16)), label="other")
        await uow.peers.add(other)
        await uow.commit()
    held, _, _ = await restricted(pair.requester, peers=[other.id])
    before = len(engine_of(pair).requests)
    with pytest.raises(PermissionDenied) as refused:
        await ask(pair, held, peer_id, service_id)
    assert refused.value.details == {"restriction": "token.peers", "peer": peer_id}
    assert len(engine_of(pair).requests) == before
    # Listed peers must be peers of the token's projects.
    with pytest.raises(InvalidInput) as unknown:
        await restricted(pair.requester, peers=[new_id("peer", secrets.token_bytes(16))])
    assert unknown.value.details["field"] == "peers"
    # A child of the held token cannot reach beyond its peers either.
    with pytest.raises(PermissionDenied) as broader:
        await restricted(pair.requester, held, peers=[peer_id])
    assert broader.value.details["restriction"] == "token.peers"


async def test_a_token_restricted_to_services_is_forbidden_any_other(pair: Pair) -> None:
    service_id, peer_id, _ = await metered(pair)
    held, _, _ = await restricted(pair.requester, services=["svc_" + "a" * 26])
    with pytest.raises(PermissionDenied) as refused:
        await ask(pair, held, peer_id, service_id)
    assert refused.value.details == {"restriction": "token.services", "service": service_id}
    allowed, _, _ = await restricted(pair.requester, services=[service_id])
    await ask(pair, allowed, peer_id, service_id)


async def test_usage_per_token_sums_to_the_grants_usage_on_the_requester(pair: Pair) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=10_000)
    team_a, a_id, _ = await restricted(pair.requester, tokens=1_000)
    team_b, b_id, _ = await restricted(pair.requester, tokens_per_minute=1_000)
    for _ in range(3):
        await ask(pair, team_a, peer_id, service_id)
    for _ in range(2):
        await ask(pair, team_b, peer_id, service_id)
    _, requester = await usage_of(pair, grant_id)
    tokens = pair.requester.tokens
    page_a = await tokens.usage(a_id, after=None, limit=100)
    page_b = await tokens.usage(b_id, after=None, limit=100)
    assert [r["token"] for r in page_a["records"]] == [a_id] * 3
    assert [r["token"] for r in page_b["records"]] == [b_id] * 2
    for name in ("requests", "prompt_tokens", "completion_tokens", "request_bytes"):
        assert page_a["totals"][name] + page_b["totals"][name] == requester["totals"][name]
    assert {r["token"] for r in requester["records"]} == {a_id, b_id}


async def test_a_tokens_requests_per_minute_refuses_with_retry_after_then_admits(
    pair: Pair,
) -> None:
    service_id, peer_id, _ = await metered(pair)
    team, _, _ = await restricted(pair.requester, requests_per_minute=2)
    await ask(pair, team, peer_id, service_id)
    pair.clock.advance(10)
    await ask(pair, team, peer_id, service_id)
    with pytest.raises(LimitExceeded) as refused:
        await ask(pair, team, peer_id, service_id)
    assert refused.value.details["limit"] == "token.requests_per_minute"
    assert refused.value.details["retry_after_seconds"] == 50
    pair.clock.advance(50)
    await ask(pair, team, peer_id, service_id)


# --- through HTTP -------------------------------------------------------------------------------


@pytest.fixture
async def api(pair: Pair) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(pair.requester)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {pair.requester.state.read_owner_token()}"},
    ) as client:
        yield client


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tokens": 0}, "tokens"),
        ({"tokens": 10**12 + 1}, "tokens"),
        ({"tokens_per_minute": 10**9 + 1}, "tokens_per_minute"),
        ({"requests_per_minute": 0}, "requests_per_minute"),
        ({"requests_per_minute": "5"}, "requests_per_minute"),
        ({"peers": []}, "peers"),
        ({"peers": ["svc_x"]}, "peers[0]"),
        ({"services": [""]}, "services[0]"),
        ({"services": "svc"}, "services"),
    ],
)
async def test_bad_restrictions_are_the_contracts_400_naming_the_field(
    api: httpx.AsyncClient, changes: dict[str, Any], field: str
) -> None:
    before = (await api.get("/api/v1/tokens")).json()
    response = await api.post("/api/v1/tokens", json={"scopes": ["inference:invoke"], **changes})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["details"]["field"] == field
    assert (await api.get("/api/v1/tokens")).json() == before


async def test_the_compatible_url_refuses_past_a_tokens_rule_in_openais_shape_with_its_headers(
    pair: Pair, api: httpx.AsyncClient
) -> None:
    service_id, peer_id, _ = await metered(pair, tokens=10_000)
    created = await api.post(
        "/api/v1/tokens",
        json={"scopes": INVOKERS, "tokens": 40, "peers": [peer_id], "services": [service_id]},
    )
    assert created.status_code == 201
    made = created.json()
    assert (made["tokens"], made["peers"], made["services"]) == (40, [peer_id], [service_id])
    team = {"Authorization": f"Bearer {made['token']}"}
    url = f"/api/v1/federation/peers/{peer_id}/v1/completions"
    body = {"model": service_id, "prompt": "one two three", "max_tokens": 5}
    first = await api.post(url, json=body, headers=team)
    assert first.status_code == 200
    # The tighter of the grant's 9,997 tokens left and the token's 37.
    assert first.headers["x-ratelimit-limit-tokens"] == "40"
    assert first.headers["x-ratelimit-remaining-tokens"] == "37"
    for _ in range(8):
        assert (await api.post(url, json=body, headers=team)).status_code == 200
    refused = await api.post(url, json=body, headers=team)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "limit_exceeded"
    assert set(error) >= {"message", "type", "code"}
    assert "token" in error["message"]
    listed = {t["id"]: t for t in (await api.get("/api/v1/tokens")).json()["tokens"]}
    assert listed[made["id"]]["remaining"]["tokens"] == 40 - 3 * 9
    usage = (await api.get(f"/api/v1/tokens/{made['id']}/usage")).json()
    # Nine answered; the refused one never left this cluster and is no grant's record.
    assert usage["totals"]["requests"] == 9
    assert set(usage) == {"token", "records", "totals", "next"}
    # A token may read its own usage without tokens:manage; another's it may not.
    own = await api.get(f"/api/v1/tokens/{made['id']}/usage", headers=team)
    assert own.status_code == 200


async def test_a_request_a_token_bounded_keeps_a_receipt_that_verifies(pair: Pair) -> None:
    """A token's budget lowers the completion bound the request is sent with: the requester
    records the body it sent (its request_bytes), so the grantor's receipt of it verifies."""
    service_id, peer_id, grant_id = await metered(pair, tokens=10_000)
    team, _, _ = await restricted(pair.requester, tokens=30)
    await ask(pair, team, peer_id, service_id, max_tokens=1000)
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert [(item.verified, item.problem) for item in kept.values()] == [(True, None)]
    grantor, requester = await usage_of(pair, grant_id)
    assert requester["totals"]["request_bytes"] == grantor["totals"]["request_bytes"]
