"""The local OpenAI-compatible URL honours a restricted token's rules for local services and
for routes: a service outside its ``services`` is 403 (also through a route it does not
list), its budgets and windows refuse with 429 naming the token's rule in OpenAI's shape, and
its use is recorded naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.support.fakes.cluster import fake_cluster
from tests.unit.federation.test_route_failover import running_service

from ficc.bootstrap import Cluster
from ficc.web.app import create_app

CHAT = "/api/v1/inference/v1/chat/completions"
ROUTES = "/api/v1/inference/routes"
MESSAGES = [{"role": "user", "content": "hi"}]
SCOPES = ["inference:invoke", "inference:manage"]


@pytest.fixture
async def cluster(tmp_path: Any) -> Cluster:
    return await fake_cluster(tmp_path / "state")


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(cluster)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {cluster.state.read_owner_token()}"},
    ) as client:
        yield client


async def token(api: httpx.AsyncClient, **rules: Any) -> tuple[str, dict[str, str]]:
    created = await api.post("/api/v1/tokens", json={"scopes": SCOPES, **rules})
    assert created.status_code == 201, created.text
    made = created.json()
    return made["id"], {"Authorization": f"Bearer {made['token']}"}


async def test_a_token_restricted_to_services_is_forbidden_another_local_service(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    service = await running_service(cluster)
    _, held = await token(api, services=["svc_" + "a" * 26])
    refused = await api.post(CHAT, json={"model": service, "messages": MESSAGES}, headers=held)
    assert refused.status_code == 403
    assert set(refused.json()["error"]) >= {"message", "type", "code"}
    _, allowed = await token(api, services=[service])
    answer = await api.post(CHAT, json={"model": service, "messages": MESSAGES}, headers=allowed)
    assert answer.status_code == 200, answer.text


async def test_a_route_reaches_only_the_services_a_token_lists_or_the_route_itself(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    service = await running_service(cluster)
    route = {"name": "chat", "policy": "priority", "targets": [{"service": service}]}
    assert (await api.post(ROUTES, json=route)).status_code == 201
    _, elsewhere = await token(api, services=["svc_" + "a" * 26])
    refused = await api.post(CHAT, json={"model": "chat", "messages": MESSAGES}, headers=elsewhere)
    assert refused.status_code == 403
    assert "x-ficc-route-target" not in refused.headers
    _, by_route = await token(api, services=["chat"])
    answer = await api.post(CHAT, json={"model": "chat", "messages": MESSAGES}, headers=by_route)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-ficc-route-target"] == service


async def test_a_tokens_budget_and_window_refuse_local_work_naming_the_rule(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    service = await running_service(cluster)
    body = {"model": service, "messages": MESSAGES, "max_tokens": 5}
    # A chat prompt is reserved as its bytes plus what a template adds (64 + 8 a message).
    _, small = await token(api, tokens=70)
    refused = await api.post(CHAT, json=body, headers=small)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "limit_exceeded"
    assert "token" in refused.json()["error"]["message"]
    minted, windowed = await token(api, requests_per_minute=1)
    first = await api.post(CHAT, json=body, headers=windowed)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    again = await api.post(CHAT, json=body, headers=windowed)
    assert again.status_code == 429
    assert again.headers["retry-after"] == "60"
    streamed = await api.post(CHAT, json={**body, "stream": True}, headers=windowed)
    assert streamed.status_code == 429
    usage = (await api.get(f"/api/v1/tokens/{minted}/usage")).json()
    [record] = usage["records"]
    assert (record["token"], record["grant"], record["service"]) == (minted, None, service)
    assert record["outcome"] == "completed"


async def test_a_restricted_tokens_stream_is_recorded_when_it_ends(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    service = await running_service(cluster)
    minted, held = await token(api, tokens=10_000)
    body = {"model": service, "messages": MESSAGES, "max_tokens": 5, "stream": True}
    streamed = await api.post(CHAT, json=body, headers=held)
    assert streamed.status_code == 200
    assert streamed.text.endswith("data: [DONE]\n\n")
    [record] = (await api.get(f"/api/v1/tokens/{minted}/usage")).json()["records"]
    assert record["outcome"] == "completed"
    listed = {t["id"]: t for t in (await api.get("/api/v1/tokens")).json()["tokens"]}
    assert listed[minted]["used"]["requests"] == 1
    assert listed[minted]["remaining"]["tokens"] == 10_000 - (
        record["prompt_tokens"] + record["completion_tokens"]
    )


async def test_a_restricted_token_is_listed_only_the_models_it_may_use(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    service = await running_service(cluster)
    route = {"name": "chat", "policy": "priority", "targets": [{"service": service}]}
    assert (await api.post(ROUTES, json=route)).status_code == 201
    _, by_route = await token(api, services=["chat"])
    listed = (await api.get("/api/v1/inference/v1/models", headers=by_route)).json()["data"]
    assert [m["id"] for m in listed] == ["chat"]
    everything = (await api.get("/api/v1/inference/v1/models")).json()["data"]
    assert [m["id"] for m in everything] == [service, "chat"]
