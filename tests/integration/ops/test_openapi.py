"""The OpenAPI document covers every /api/v1 route with typed bodies; /api/v1/docs lists them;
real answers, and those to requests a fuzzer generates from the document, are as it says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, settings
from pydantic import ValidationError
from schemathesis import Case, GenerationMode
from tests.support.cluster import RunningCluster
from tests.support.federation import add_service
from tests.support.openapi import (
    FUZZ_BASE_URL,
    FUZZ_CHECKS,
    FuzzTarget,
    api_document,
    check_answer,
    documented_model,
    fuzz_target,
)

from ficc.web.app import ROUTERS
from ficc.web.errors import OPENAI_PATH

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
                # An optional body (forget's) is its named model or null.
                body = next((b for b in body.get("anyOf", ()) if "$ref" in b), body)
                named = body.get("$ref", "").rsplit("/", 1)[-1]
                # A service spec and a grant's terms are free-form objects checked by the
                # domain; every other body is a named model.
                assert named in schemas or body.get("type") == "object", f"{method} {route.path}"
            # The OpenAI-compatible URLs answer errors in OpenAI's shape, and take OpenAI's
            # bodies, read raw but documented.
            compatible = OPENAI_PATH.match(route.path) is not None
            envelope = "/OpenAIErrorEnvelope" if compatible else "/ErrorEnvelope"
            for status in ("4XX", "5XX"):
                error = operation["responses"][status]["content"]["application/json"]["schema"]
                assert error["$ref"].endswith(envelope), f"{method} {route.path}"
            if compatible and method == "POST":
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                assert {"model"} < set(body["required"]), f"{method} {route.path}"
    assert set(schemas["ErrorBody"]["required"]) == {"code", "message", "details"}
    assert set(schemas["OpenAIError"]["required"]) == {"message", "type", "code", "param"}


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


def test_every_api_route_documents_its_success_answer(json_cluster: RunningCluster) -> None:
    document = json_cluster.client().get("/api/v1/openapi.json").json()
    for route in _api_routes():
        for method in route.methods:
            responses = document["paths"][route.path][method.lower()]["responses"]
            success = [code for code in responses if code.startswith("2")]
            assert success == [str(route.status_code or 200)], f"{method} {route.path}"
            answer = responses[success[0]]
            if route.status_code == 204:
                assert "content" not in answer, f"{method} {route.path}"
                continue
            schema = answer["content"]["application/json"]["schema"]
            named = schema.get("$ref", "").rsplit("/", 1)[-1]
            assert named in document["components"]["schemas"], f"{method} {route.path}"
            assert document["components"]["schemas"][named] != {}, f"{method} {route.path}"


def test_real_answers_match_the_documented_models(
    json_cluster: RunningCluster, tmp_path: Path
) -> None:
    document = json_cluster.client().get("/api/v1/openapi.json").json()
    owner = json_cluster.owner()
    created = check_answer(
        document, "/api/v1/tokens", owner.post("/api/v1/tokens", json={"scopes": ["discover"]})
    )
    check_answer(document, "/api/v1/tokens", owner.get("/api/v1/tokens"))
    check_answer(document, "/api/v1/projects", owner.post("/api/v1/projects", json={"name": "p2"}))
    check_answer(document, "/api/v1/projects", owner.get("/api/v1/projects"))
    check_answer(document, "/api/v1/session", owner.get("/api/v1/session"))
    check_answer(document, "/api/v1/login-links", owner.post("/api/v1/login-links"))
    check_answer(document, "/api/v1/nodes", owner.get("/api/v1/nodes"))
    service_id = add_service(json_cluster, "documented", tmp_path)
    check_answer(document, "/api/v1/models", owner.get("/api/v1/models"))
    services = check_answer(
        document, "/api/v1/inference/services", owner.get("/api/v1/inference/services")
    )
    assert [s["id"] for s in services["services"]] == [service_id]
    model_id = services["services"][0]["spec"]["model"]
    check_answer(document, "/api/v1/models/{model_id}", owner.get(f"/api/v1/models/{model_id}"))
    check_answer(
        document,
        "/api/v1/inference/services/{service_id}",
        owner.get(f"/api/v1/inference/services/{service_id}"),
    )
    check_answer(document, "/api/v1/federation/", owner.get("/api/v1/federation/"))
    check_answer(document, "/api/v1/federation/audit", owner.get("/api/v1/federation/audit"))
    # A shape that drifts is caught: one field more or one field fewer fails validation.
    model = documented_model(document, "POST", "/api/v1/tokens", 201)
    with pytest.raises(ValidationError):
        model.model_validate({**created, "secret": "x"})
    with pytest.raises(ValidationError):
        model.model_validate({k: v for k, v in created.items() if k != "token"})


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    with fuzz_target(tmp_path_factory.mktemp("fuzzed")) as target:
        assert target.document == API_DOCUMENT
        yield target


# The schema is made when the module loads (the document depends on the routes alone), so that
# Schemathesis makes one test per operation; its fixture-loaded schema needs a pytest older
# than this suite's. Examples are derived from the operation, the same on every run.
API_DOCUMENT = api_document()
fuzzed_api = schemathesis.openapi.from_dict(API_DOCUMENT)
fuzzed_api.config.update(base_url=FUZZ_BASE_URL)
fuzzed_api.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=10, deterministic=True
)


@fuzzed_api.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_the_document_says(case: Case[Any], fuzzed: FuzzTarget) -> None:
    """Generated requests, valid and invalid, to every operation, as the owner of a cluster
    with a running service and a peer whose grant publishes another: no server error, and
    every status, content type and body is one the document gives."""
    response = fuzzed.send(case)
    case.validate_response(response, checks=FUZZ_CHECKS)
