"""The OpenAI-compatible POST routes skip FastAPI's routing, never a boundary.

They are served by :class:`ficc.web.fast_routes.FastRoutes` with the endpoint and the scoped
dependency FastAPI would have used; the Host check, the body limit, the request ID, the
metrics' route template and the OpenAI error shape apply to them as to every route.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, Request
from starlette.types import Receive, Scope, Send
from tests.support.cluster import RunningCluster
from tests.support.federation import error_of
from tests.support.ops import sample, scrape

from ficc.web.app import ROUTERS
from ficc.web.auth import Context, scoped
from ficc.web.fast_routes import FastRoute, FastRoutes, fast_path

LOCAL_CHAT = "/api/v1/inference/v1/chat/completions"
FEDERATED = "/api/v1/federation/peers/{peer_id}/v1"
CHAT = {"model": "svc_unknown", "messages": [{"role": "user", "content": "Hi"}]}
FAST = {
    f"{prefix}/{path}"
    for prefix in ("/api/v1/inference/v1", FEDERATED)
    for path in ("chat/completions", "completions", "embeddings", "responses")
} | {"/api/v1/federation/peers/{peer_id}/request"}
"""The OpenAI POST routes, and the federated request route: it authenticates before it reads
a body that may be 65 MiB (G2)."""


async def _never_called(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("only the routes are read")


def _served_count(cluster: RunningCluster, route: str, status: int) -> float:
    return sample(
        scrape(cluster), "ficc_http_requests_total", method="POST", route=route, status=str(status)
    )


def test_every_inference_post_route_is_served_fast_with_its_declared_scope() -> None:
    fast = FastRoutes(_never_called, routes=[r for router in ROUTERS for r in router.routes])
    assert {route.route.path for route in fast.fast} == FAST
    for route in fast.fast:
        expected = "federation:invoke" if "federation" in route.route.path else "inference:invoke"
        assert getattr(route.context, "required_scopes", None) == (expected,)


def test_an_endpoint_taking_anything_but_its_path_request_and_context_is_refused() -> None:
    router = APIRouter()

    @router.post("/x/{name}")
    @fast_path
    async def endpoint(
        name: str, body: dict[str, Any], request: Request, ctx: Context = scoped("discover")
    ) -> Any:
        raise AssertionError("never served")

    (route,) = router.routes
    with pytest.raises(TypeError, match="takes exactly"):
        FastRoute.of(route)  # type: ignore[arg-type]


@pytest.mark.parametrize("route", [LOCAL_CHAT, FEDERATED + "/chat/completions"])
def test_authentication_and_scope_refusals_keep_the_openai_shape_and_request_id(
    cluster: RunningCluster, route: str
) -> None:
    path = route.replace("{peer_id}", "peer_0000000000000000000000")
    before = _served_count(cluster, route, 401)
    response = cluster.client(**{"X-Request-ID": "req-fast-route-1"}).post(path, json=CHAT)
    error = error_of(response, 401)
    assert error["type"] == "authentication_error"
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["x-request-id"] == "req-fast-route-1"
    # Counted under the route's template: a scan of raw paths cannot grow the label set.
    assert _served_count(cluster, route, 401) == before + 1

    no_scope = cluster.token("models:read")
    error = error_of(cluster.client(no_scope).post(path, json=CHAT), 403)
    assert error["type"] == "permission_error"
    assert error["code"] == "forbidden"


def test_the_host_check_and_body_limit_run_before_a_fast_route(cluster: RunningCluster) -> None:
    owner = cluster.owner()
    refused = owner.post(LOCAL_CHAT, json=CHAT, headers={"Host": "evil.example"})
    assert error_of(refused, 400)["details"]["field"] == "host"
    large = {**CHAT, "padding": "x" * (2 * 1024 * 1024)}
    assert error_of(owner.post(LOCAL_CHAT, json=large), 413)["code"] == "too_large"


def test_a_fast_routes_own_refusals_name_the_field(cluster: RunningCluster) -> None:
    owner = cluster.owner()
    malformed = owner.post(
        LOCAL_CHAT, content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert error_of(malformed, 400)["type"] == "invalid_request_error"
    unknown = error_of(owner.post(LOCAL_CHAT, json=CHAT), 404)
    assert unknown["param"] == "model"
    peer = FEDERATED.replace("{peer_id}", "peer_0000000000000000000000") + "/chat/completions"
    assert error_of(owner.post(peer, json=CHAT), 404)["code"] == "not_found"


def test_other_methods_on_a_fast_path_go_on_to_fastapi(cluster: RunningCluster) -> None:
    response = cluster.owner().get(LOCAL_CHAT)
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "invalid_request_error"
