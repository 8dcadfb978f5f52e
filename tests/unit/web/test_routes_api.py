"""Routes through the HTTP API on an in-process cluster: bad input is the contract's 400 naming
the field, the records round trip, and the local compatible URL takes a route's name or ID as
``model``, names the target in ``x-ficc-route-target`` and lists routes beside services."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.fakes.cluster import fake_cluster
from tests.unit.federation.test_route_failover import running_service

from ficc.bootstrap import Cluster
from ficc.web.app import create_app

ROUTES = "/api/v1/inference/routes"
CHAT = "/api/v1/inference/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def cluster(tmp_path: Path) -> Cluster:
    return await fake_cluster(tmp_path / "state")


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    token = cluster.state.read_owner_token()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(cluster)),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        yield client


def route_body(service: str, **changes: Any) -> dict[str, Any]:
    return {"name": "chat", "policy": "priority", "targets": [{"service": service}], **changes}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"policy": "random"}, "policy"),
        ({"name": "a b"}, "name"),
        ({"targets": []}, "targets"),
        ({"targets": [{"service": "svc_x"}]}, "targets[0].service"),
        ({"targets": [{"service": "svc_" + "a" * 26, "weight": -1}]}, "targets[0].weight"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_a_bad_route_is_the_contracts_400_naming_the_field(
    api: httpx.AsyncClient, changes: dict[str, Any], field: str
) -> None:
    response = await api.post(ROUTES, json=route_body("svc_" + "a" * 26, **changes))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["details"]["field"] == field
    assert (await api.get(ROUTES)).json() == {"routes": []}


async def test_a_route_round_trips_and_is_replaced_and_removed(api: httpx.AsyncClient) -> None:
    service = "svc_" + "a" * 26
    created = await api.post(ROUTES, json=route_body(service))
    assert created.status_code == 201
    route = created.json()
    assert set(route) == {"id", "name", "policy", "targets"}
    assert route["targets"] == [{"service": service, "weight": 1, "max_in_flight": None}]
    assert (await api.get(f"{ROUTES}/{route['id']}")).json() == route
    assert (await api.post(ROUTES, json=route_body(service))).json()["error"]["code"] == (
        "conflict"
    )
    replaced = await api.put(
        f"{ROUTES}/{route['id']}", json=route_body(service, policy="least-busy")
    )
    assert replaced.json()["policy"] == "least-busy"
    assert (await api.get(ROUTES)).json() == {"routes": [replaced.json()]}
    assert (await api.delete(f"{ROUTES}/{route['id']}")).status_code == 204
    assert (await api.get(f"{ROUTES}/{route['id']}")).status_code == 404


async def test_the_local_url_takes_a_routes_name_or_id_and_names_the_target(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    service = await running_service(cluster)
    route = (await api.post(ROUTES, json=route_body(service))).json()
    for model in ("chat", route["id"]):
        answer = await api.post(CHAT, json={"model": model, "messages": MESSAGES})
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-ficc-route-target"] == service
    streamed = await api.post(CHAT, json={"model": "chat", "messages": MESSAGES, "stream": True})
    assert streamed.status_code == 200
    assert streamed.headers["x-ficc-route-target"] == service
    assert streamed.headers["content-type"].startswith("text/event-stream")
    models = (await api.get("/api/v1/inference/v1/models")).json()["data"]
    assert [m["id"] for m in models] == [service, "chat"]
    assert (await api.get("/api/v1/inference/v1/models/chat")).json()["id"] == "chat"


async def test_a_route_whose_targets_all_refused_is_answered_in_openais_shape(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    await api.post(ROUTES, json=route_body("svc_" + "a" * 26))
    answer = await api.post(CHAT, json={"model": "chat", "messages": MESSAGES})
    assert answer.status_code == 409
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
    assert "x-ficc-route-target" not in answer.headers


async def test_a_route_needs_inference_manage_to_change(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    from ficc.services import accounts

    async with cluster.uow_factory() as uow:
        owner = await uow.users.owner()
        assert owner is not None
        issued = await accounts.mint_token(
            uow,
            cluster.clock,
            user=owner,
            scopes=frozenset({"inference:read", "inference:invoke"}),
            projects=frozenset({"default"}),
            lifetime_seconds=None,
            actor="test",
        )
        await uow.commit()
    headers = {"Authorization": f"Bearer {issued.token}"}
    refused = await api.post(ROUTES, json=route_body("svc_" + "a" * 26), headers=headers)
    assert refused.status_code == 403
    assert refused.json()["error"]["details"]["missing_scope"] == "inference:manage"
    assert (await api.get(ROUTES, headers=headers)).status_code == 200


async def test_the_consoles_services_page_lists_the_routes_with_their_targets_in_order(
    cluster: Cluster, api: httpx.AsyncClient
) -> None:
    from tests.unit.web.test_console_pages import _render

    service, peer = "svc_" + "a" * 26, "per_" + "b" * 26
    targets = [{"service": service}, {"peer": peer, "service": service, "weight": 2}]
    route = (await api.post(ROUTES, json=route_body(service, targets=targets))).json()
    page = _render("_services.html", services=[], routes=[route], live=False)
    assert route["id"] in page
    assert page.index(f"<code>{service}</code>") < page.index(f"<code>{peer}/{service}</code>")
    assert "weight 2" in page
