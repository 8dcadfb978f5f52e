"""The OpenAPI document covers every /api/v1 route with typed bodies; /api/v1/docs lists them."""

from __future__ import annotations

from fastapi.routing import APIRoute
from tests.support.cluster import RunningCluster

from ficc.web.app import ROUTERS

API_PREFIX = "/api/v1"


def _api_routes() -> list[APIRoute]:
    routes = [route for router in ROUTERS for route in router.routes]
    return [r for r in routes if isinstance(r, APIRoute) and r.path.startswith(API_PREFIX)]


def test_every_api_route_is_documented_with_its_body_and_errors(
    json_cluster: RunningCluster,
) -> None:
    response = json_cluster.client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    schemas = document["components"]["schemas"]
    routes = _api_routes()
    assert len(routes) >= 30
    for route in routes:
        for method in route.methods:
            operation = document["paths"].get(route.path, {}).get(method.lower())
            assert operation is not None, f"{method} {route.path} is not documented"
            if route.body_field is not None:
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                named = body.get("$ref", "").rsplit("/", 1)[-1]
                # A service spec and a grant's terms are free-form objects checked by the
                # domain; every other body is a named model.
                assert named in schemas or body.get("type") == "object", f"{method} {route.path}"
            error = operation["responses"]["4XX"]["content"]["application/json"]["schema"]
            assert error["$ref"].endswith("/ErrorEnvelope")
    envelope = schemas["ErrorBody"]
    assert set(envelope["required"]) == {"code", "message", "details"}


def test_the_docs_page_lists_every_operation_and_loads_nothing_from_elsewhere(
    json_cluster: RunningCluster,
) -> None:
    page = json_cluster.client().get("/api/v1/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    for route in _api_routes():
        assert f"<code>{route.path}</code>" in page.text, route.path
    assert "<script" not in page.text
    assert "http://" not in page.text
    assert "https://" not in page.text
