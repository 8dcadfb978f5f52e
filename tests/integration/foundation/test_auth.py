"""Authentication, CSRF, project selection and tokens against a real server."""

from __future__ import annotations

import json

import httpx
import pytest
from tests.support.cluster import RunningCluster, ficc

from ficc.domain.audit import MAX_AUDIT_PAGE, MAX_AUDIT_SEQ


def _error(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    error = dict(body["error"])
    # Every error names its request (X-Request-ID); the rest of details is the rule's own.
    details = dict(error["details"])
    assert details.pop("request_id") == response.headers["x-request-id"]
    error["details"] = details
    return error


def test_a_request_without_a_credential_is_unauthenticated(cluster: RunningCluster) -> None:
    response = cluster.client().get("/api/v1/models")
    assert response.status_code == 401
    assert _error(response)["code"] == "unauthenticated"


def test_an_unknown_bearer_token_is_unauthenticated(cluster: RunningCluster) -> None:
    response = cluster.client("ficc_not-a-real-token").get("/api/v1/models")
    assert response.status_code == 401
    assert _error(response)["code"] == "unauthenticated"


def test_a_token_in_the_query_string_is_never_accepted(cluster: RunningCluster) -> None:
    response = cluster.client().get("/api/v1/models", params={"access_token": cluster.owner_token})
    assert response.status_code == 401


def test_a_token_lacking_the_scope_is_forbidden_and_the_scope_is_named(
    cluster: RunningCluster,
) -> None:
    token = cluster.token("models:read")
    response = cluster.client(token).get("/api/v1/nodes")
    assert response.status_code == 403
    error = _error(response)
    assert error["code"] == "forbidden"
    assert error["details"] == {"missing_scope": "resources:read"}


def test_a_token_is_shown_once_and_stored_only_as_a_digest(cluster: RunningCluster) -> None:
    token = cluster.token("models:read")
    database = (cluster.state_dir / "ficc.db").read_bytes()
    assert token.encode() not in database


def test_a_revoked_token_is_refused(cluster: RunningCluster) -> None:
    created = cluster.owner().post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "projects": ["default"]}
    )
    token = created.json()
    assert cluster.client(token["token"]).get("/api/v1/models").status_code == 200
    assert cluster.owner().delete(f"/api/v1/tokens/{token['id']}").status_code == 204
    assert cluster.client(token["token"]).get("/api/v1/models").status_code == 401


def test_a_token_cannot_hold_a_scope_its_creator_lacks(cluster: RunningCluster) -> None:
    creator = cluster.token("tokens:manage")
    response = cluster.client(creator).post(
        "/api/v1/tokens", json={"scopes": ["models:manage"], "projects": ["default"]}
    )
    assert response.status_code == 403
    assert _error(response)["details"] == {"missing_scope": "models:manage"}


def test_unknown_fields_are_refused_naming_the_field(cluster: RunningCluster) -> None:
    response = cluster.owner().post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "colour": "red"}
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "invalid_request"
    assert "colour" in str(error["message"])


def test_a_wrong_type_is_refused_naming_the_field(cluster: RunningCluster) -> None:
    response = cluster.owner().post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "lifetime": "60"}
    )
    assert response.status_code == 400
    assert _error(response)["details"] == {"field": "lifetime"}


def test_an_unknown_scope_is_refused_naming_the_index(cluster: RunningCluster) -> None:
    response = cluster.owner().post("/api/v1/tokens", json={"scopes": ["models:read", "root"]})
    assert response.status_code == 400
    assert _error(response)["details"] == {"field": "scopes[1]"}


def test_malformed_json_is_an_invalid_request(cluster: RunningCluster) -> None:
    response = cluster.owner().post(
        "/api/v1/tokens", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert _error(response)["code"] == "invalid_request"


def test_a_body_over_the_limit_is_refused_with_413(cluster: RunningCluster) -> None:
    response = cluster.owner().post(
        "/api/v1/projects",
        content=b"{" + b" " * (2 * 1024 * 1024) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert _error(response)["code"] == "too_large"


def test_an_unknown_route_answers_the_error_envelope(cluster: RunningCluster) -> None:
    response = cluster.owner().get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert _error(response)["code"] == "not_found"


def test_projects_are_created_once_and_a_duplicate_is_a_conflict(cluster: RunningCluster) -> None:
    owner = cluster.owner()
    assert owner.post("/api/v1/projects", json={"name": "research"}).status_code == 201
    again = owner.post("/api/v1/projects", json={"name": "research"})
    assert again.status_code == 409
    assert _error(again)["code"] == "conflict"
    names = [project["name"] for project in owner.get("/api/v1/projects").json()["projects"]]
    assert names == ["default", "research"]


def test_a_bad_project_name_is_refused(cluster: RunningCluster) -> None:
    response = cluster.owner().post("/api/v1/projects", json={"name": "../etc"})
    assert response.status_code == 400
    assert _error(response)["details"] == {"field": "name"}


def test_a_credential_not_admitted_to_the_selected_project_is_forbidden(
    cluster: RunningCluster,
) -> None:
    cluster.owner().post("/api/v1/projects", json={"name": "secret-lab"})
    token = cluster.token("models:read")
    response = cluster.client(token, **{"X-FICC-Project": "secret-lab"}).get("/api/v1/models")
    assert response.status_code == 403
    assert _error(response)["details"] == {"project": "secret-lab"}


def test_an_unknown_project_is_not_found(cluster: RunningCluster) -> None:
    response = cluster.client(cluster.owner_token, **{"X-FICC-Project": "nowhere"}).get(
        "/api/v1/models"
    )
    assert response.status_code == 404


def _login(cluster: RunningCluster) -> tuple[httpx.Client, str]:
    password = "correct horse battery staple"
    result = ficc("set-password", "--password-stdin", state_dir=cluster.state_dir, stdin=password)
    assert result.returncode == 0, result.stderr
    browser = cluster.client()
    response = browser.post("/api/v1/session", json={"username": "owner", "password": password})
    assert response.status_code == 201, response.text
    return browser, str(response.json()["csrf_token"])


def test_password_login_sets_an_httponly_strict_cookie(cluster: RunningCluster) -> None:
    password = "correct horse battery staple"
    ficc("set-password", "--password-stdin", state_dir=cluster.state_dir, stdin=password)
    response = cluster.client().post(
        "/api/v1/session", json={"username": "owner", "password": password}
    )
    cookie = response.headers["set-cookie"].lower()
    assert "ficc_session=" in cookie
    assert "httponly" in cookie
    assert "samesite=strict" in cookie


def test_a_wrong_password_is_refused(cluster: RunningCluster) -> None:
    _login(cluster)
    response = cluster.client().post(
        "/api/v1/session", json={"username": "owner", "password": "wrong password!!"}
    )
    assert response.status_code == 401


def test_a_cookie_request_without_the_csrf_header_is_refused(cluster: RunningCluster) -> None:
    browser, _ = _login(cluster)
    response = browser.post("/api/v1/projects", json={"name": "no-csrf"})
    assert response.status_code == 403
    assert _error(response)["code"] == "csrf_failed"


def test_a_cookie_request_with_a_wrong_csrf_header_is_refused(cluster: RunningCluster) -> None:
    browser, _ = _login(cluster)
    response = browser.post(
        "/api/v1/projects", json={"name": "bad-csrf"}, headers={"X-CSRF-Token": "guess"}
    )
    assert response.status_code == 403
    assert _error(response)["code"] == "csrf_failed"


def test_a_cookie_request_with_the_csrf_header_is_accepted(cluster: RunningCluster) -> None:
    browser, csrf = _login(cluster)
    response = browser.post(
        "/api/v1/projects", json={"name": "with-csrf"}, headers={"X-CSRF-Token": csrf}
    )
    assert response.status_code == 201
    assert browser.get("/api/v1/session").json()["csrf_token"] == csrf


def test_a_bearer_request_needs_no_csrf_header(cluster: RunningCluster) -> None:
    response = cluster.owner().post("/api/v1/projects", json={"name": "bearer-only"})
    assert response.status_code == 201


def test_logout_ends_the_session(cluster: RunningCluster) -> None:
    browser, csrf = _login(cluster)
    assert browser.delete("/api/v1/session", headers={"X-CSRF-Token": csrf}).status_code == 204
    assert browser.get("/api/v1/session").status_code == 401


def test_a_login_link_works_once(cluster: RunningCluster) -> None:
    result = ficc("login-link", state_dir=cluster.state_dir)
    assert result.returncode == 0, result.stderr
    url = result.stdout.strip()
    assert url.startswith(cluster.url + "/login/")
    browser = cluster.client()
    first = browser.get(url, follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/ui"
    assert browser.get("/api/v1/session").json()["user"] == "owner"
    assert cluster.client().get(url, follow_redirects=False).status_code == 401


def test_the_ui_shows_the_cluster_to_a_signed_in_owner(cluster: RunningCluster) -> None:
    browser = cluster.client()
    assert browser.get("/ui").status_code == 401
    browser.get(ficc("login-link", state_dir=cluster.state_dir).stdout.strip())
    page = browser.get("/ui")
    assert page.status_code == 200
    assert "Signed in as <b>owner</b>" in page.text


def test_token_create_through_the_cli_prints_a_usable_token(cluster: RunningCluster) -> None:
    result = ficc("token-create", "--scope", "resources:read", state_dir=cluster.state_dir)
    assert result.returncode == 0, result.stderr
    token = json.loads(result.stdout)["token"]
    assert cluster.client(token).get("/api/v1/nodes").status_code == 200


def test_a_refusal_through_the_cli_is_json_on_stderr_and_exit_1(cluster: RunningCluster) -> None:
    result = ficc("token-create", "--scope", "root", state_dir=cluster.state_dir)
    assert result.returncode == 1
    assert json.loads(result.stderr)["error"]["code"] == "invalid_request"
    assert result.stdout == ""


def test_the_audit_log_records_token_and_project_changes(cluster: RunningCluster) -> None:
    cluster.owner().post("/api/v1/projects", json={"name": "audited"})
    entries = cluster.owner().get("/api/v1/federation/audit").json()["entries"]
    actions = [entry["action"] for entry in entries]
    assert "token.created" in actions
    assert "session.created" in actions or "owner.created" in actions
    seqs = [entry["seq"] for entry in entries]
    assert seqs == sorted(seqs)
    audited = cluster.client(cluster.owner_token, **{"X-FICC-Project": "audited"}).get(
        "/api/v1/federation/audit"
    )
    assert any(entry["action"] == "project.created" for entry in audited.json()["entries"])


@pytest.mark.parametrize(
    ("query", "field", "rule"),
    [
        ({"after": "191046698193310524515038619762688"}, "after", str(MAX_AUDIT_SEQ)),
        ({"after": str(MAX_AUDIT_SEQ + 1)}, "after", str(MAX_AUDIT_SEQ)),
        ({"after": "-1"}, "after", "greater than or equal to 0"),
        ({"after": "1.5"}, "after", "integer"),
        ({"after": "abc"}, "after", "integer"),
        ({"after": ""}, "after", "integer"),
        ({"limit": "0"}, "limit", "greater than or equal to 1"),
        ({"limit": str(MAX_AUDIT_PAGE + 1)}, "limit", str(MAX_AUDIT_PAGE)),
        ({"limit": "191046698193310524515038619762688"}, "limit", str(MAX_AUDIT_PAGE)),
    ],
)
def test_an_audit_cursor_or_limit_out_of_range_is_refused_naming_the_field_and_the_rule(
    cluster: RunningCluster, query: dict[str, str], field: str, rule: str
) -> None:
    response = cluster.owner().get("/api/v1/federation/audit", params=query)
    assert response.status_code == 400, response.text
    error = _error(response)
    assert error["code"] == "invalid_request"
    assert error["details"] == {"field": field}
    message = str(error["message"])
    assert message.startswith(f"{field}:"), message
    assert rule in message, message


def test_the_largest_audit_cursor_is_an_empty_page(cluster: RunningCluster) -> None:
    response = cluster.owner().get("/api/v1/federation/audit", params={"after": MAX_AUDIT_SEQ})
    assert response.status_code == 200, response.text
    assert response.json()["entries"] == []
