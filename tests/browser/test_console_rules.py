"""The console's rules over plain HTTP (no browser): CSRF on every action, refusals that change
nothing, the security headers, and the vendored files served as recorded."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
from tests.support.cluster import RunningCluster, ficc
from tests.support.federation import audit_entries

STATIC = Path(__file__).resolve().parents[2] / "src" / "ficc" / "web" / "static"


def _signed_in(cluster: RunningCluster) -> tuple[httpx.Client, str]:
    browser = cluster.client()
    link = ficc("login-link", state_dir=cluster.state_dir).stdout.strip()
    assert browser.get(link).status_code == 303
    csrf = str(browser.get("/api/v1/session").json()["csrf_token"])
    return browser, csrf


def _token_creations(cluster: RunningCluster) -> int:
    entries = audit_entries(cluster.owner())
    return sum(1 for entry in entries if entry["action"] == "token.created")


def test_an_action_without_the_csrf_header_is_refused_and_changes_nothing(
    cluster: RunningCluster,
) -> None:
    browser, csrf = _signed_in(cluster)
    before = _token_creations(cluster)
    form = {"scopes": "models:read", "lifetime_hours": "1"}
    for headers in ({}, {"X-CSRF-Token": "not-" + csrf}):
        response = browser.post("/ui/p/default/tokens", data=form, headers=headers)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "csrf_failed"
    assert _token_creations(cluster) == before
    made = browser.post("/ui/p/default/tokens", data=form, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 200
    assert re.search(r'value="ficc_[A-Za-z0-9_-]+"', made.text)
    assert _token_creations(cluster) == before + 1


def test_every_console_form_carries_the_csrf_token(cluster: RunningCluster) -> None:
    browser, csrf = _signed_in(cluster)
    for path in ("/ui", "/ui/p/default/tokens", "/ui/p/default/federation"):
        page = browser.get(path).text
        forms = re.findall(r"<form\b[^>]*>", page)
        unsafe = [form for form in forms if "hx-post" in form]
        assert unsafe, path
        for form in unsafe:
            assert f"&#34;X-CSRF-Token&#34;: &#34;{csrf}&#34;" in form, form


def test_a_refused_limit_names_the_field_and_leaves_no_trace(cluster: RunningCluster) -> None:
    browser, csrf = _signed_in(cluster)
    response = browser.post(
        "/ui/p/default/tokens",
        data={"scopes": "models:read", "lifetime_hours": "many"},
        headers={"X-CSRF-Token": csrf},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("invalid_request", "lifetime")
    oversized = browser.post(
        "/ui/p/default/tokens/revoke",
        content=b"token=" + b"a" * (64 * 1024 + 1),
        headers={"X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert oversized.status_code == 413


def test_pages_carry_the_security_headers_and_the_sign_in_page_needs_no_session(
    cluster: RunningCluster,
) -> None:
    anonymous = cluster.client().get("/ui")
    assert anonymous.status_code == 401
    assert "You are not signed in" in anonymous.text
    browser, _ = _signed_in(cluster)
    for response in (anonymous, browser.get("/ui/p/default/models")):
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["X-Frame-Options"] == "DENY"
    assert browser.get("/ui/p/default/models").status_code == 200
    assert cluster.client().get("/ui/p/default/models").status_code == 401


def test_the_vendored_htmx_is_the_recorded_release_and_nothing_else_is_served(
    cluster: RunningCluster,
) -> None:
    recorded = (STATIC / "README").read_text()
    served = cluster.client().get("/ui/static/htmx.min.js")
    assert served.status_code == 200
    assert "htmx.org 2.0.11" in recorded
    assert hashlib.sha256(served.content).hexdigest() in recorded
    for name in ("README", "..%2Fconsole.py", "%2e%2e%2f%2e%2e%2fapp.py"):
        assert cluster.client().get(f"/ui/static/{name}").status_code == 404
