"""Every route declares its scope, and every route refuses a credential without it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from tests.support.cluster import RunningCluster

from ficc.domain.scopes import LOCAL_SCOPES
from ficc.web.app import ROUTERS
from ficc.web.auth import AUTHENTICATED_ONLY

PUBLIC_ROUTES = {
    ("GET", "/"),
    ("GET", "/ui"),
    ("GET", "/ui/static/{name}"),
    ("POST", "/api/v1/session"),
    ("GET", "/login/{secret}"),
}


def _declared(route: APIRoute) -> tuple[tuple[str, ...], bool, bool]:
    """(scopes, local_owner, public) from the route's FICC dependency."""
    for dependency in route.dependant.dependencies:
        call = dependency.call
        if call is not None and hasattr(call, "required_scopes"):
            return (
                tuple(call.required_scopes),
                bool(getattr(call, "local_owner", False)),
                bool(getattr(call, "public", False)),
            )
    raise AssertionError(f"{route.path} declares no FICC scope dependency")


def _routes(tmp_path: Path) -> Iterator[tuple[str, str, tuple[str, ...], bool, bool]]:
    routes = [route for router in ROUTERS for route in router.routes]
    assert all(isinstance(route, APIRoute) for route in routes)
    for route in routes:
        assert isinstance(route, APIRoute)
        scopes, owner_only, is_public = _declared(route)
        for method in sorted(route.methods):
            yield method, route.path, scopes, owner_only, is_public


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "xyz_aaaaaaaaaaaaaaaaaaaaaaaaaa", path)


def test_every_route_declares_a_scope_or_is_a_known_public_route(tmp_path: Path) -> None:
    routes = list(_routes(tmp_path))
    assert len(routes) >= 15
    for method, path, scopes, _, is_public in routes:
        if is_public:
            assert (method, path) in PUBLIC_ROUTES, f"{method} {path} is public unexpectedly"
        else:
            assert scopes, f"{method} {path} declares no scope"
            assert all(s in LOCAL_SCOPES or s == AUTHENTICATED_ONLY for s in scopes)


def test_every_scoped_route_refuses_a_credential_without_its_scope(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    checked = 0
    for method, path, scopes, _, is_public in _routes(tmp_path):
        if is_public:
            continue
        if scopes == (AUTHENTICATED_ONLY,):
            response = cluster.client().request(method, _concrete(path), json={})
            assert response.status_code == 401, f"{method} {path}"
            checked += 1
            continue
        for scope in scopes:
            others = [s for s in LOCAL_SCOPES if s != scope]
            token = cluster.token(*others)
            response = cluster.client(token).request(method, _concrete(path), json={})
            assert response.status_code == 403, f"{method} {path} without {scope}"
            error = response.json()["error"]
            if "/v1/" in path.removeprefix("/api/v1/"):
                # The OpenAI-compatible URLs answer in OpenAI's error shape.
                assert error["code"] == "forbidden"
                assert scope in error["message"]
            else:
                assert error["details"] == {
                    "missing_scope": scope,
                    "request_id": response.headers["x-request-id"],
                }
            checked += 1
    assert checked >= 12


def test_owner_only_routes_refuse_a_token_with_every_scope_but_less_than_the_owner(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    owner_only = [(method, path) for method, path, _, owner, _ in _routes(tmp_path) if owner]
    assert ("POST", "/api/v1/models") in owner_only
    # All scopes but one unrelated to the route: a powerful token that is still not the owner.
    for method, path in owner_only:
        token = cluster.token(*[s for s in LOCAL_SCOPES if s != "federation:read"])
        response = cluster.client(token).request(method, _concrete(path), json={})
        assert response.status_code == 403, f"{method} {path}"
        assert response.json()["error"]["details"] == {
            "requires": "local_owner",
            "request_id": response.headers["x-request-id"],
        }


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_unknown_methods_on_known_routes_get_the_error_envelope(
    cluster: RunningCluster, method: str
) -> None:
    response = cluster.owner().request(method, "/api/v1/nodes")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "invalid_request"
