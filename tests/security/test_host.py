"""The host boundary: state directory permissions, password logins under attack, the Host
header (DNS rebinding), the session cookie behind https and what /ui shows."""

from __future__ import annotations

import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from tests.security.conftest import Figures
from tests.support.authority import (
    OWNER_PASSWORD,
    error_of,
    log_in,
    query,
    set_owner_password,
    snapshot,
    without_request_id,
)
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.federation import configured_pair, send_offer

from ficc.base.errors import LimitExceeded
from ficc.domain.accounts import (
    GLOBAL_FREE_FAILURES,
    GLOBAL_MAX_BACKOFF_SECONDS,
    MAX_LOGINS_IN_FLIGHT,
    LoginThrottle,
)

BACKOFF_DEADLINE_SECONDS = 10.0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _login(cluster: RunningCluster, password: str, **headers: str) -> httpx.Response:
    return cluster.client(**headers).post(
        "/api/v1/session", json={"username": "owner", "password": password}
    )


def test_init_and_serve_take_back_a_pre_existing_group_readable_state_directory(
    tmp_path: Path, figures: Figures
) -> None:
    state_dir = tmp_path / "shared"
    state_dir.mkdir()
    state_dir.chmod(0o755)
    assert ficc("init", state_dir=state_dir).returncode == 0
    assert _mode(state_dir) == 0o700
    assert _mode(state_dir / "ficc.db") == 0o600
    # As an older FICC (or a careless copy) left it: readable by group and others.
    for path in (state_dir, state_dir / "run", state_dir / "store"):
        path.chmod(0o755)
    (state_dir / "ficc.db").chmod(0o644)
    running = start_cluster(state_dir)
    try:
        files = ["ficc.db", "ficc.db-wal", "ficc.db-shm", "server.json"]
        modes = {name: _mode(state_dir / name) for name in files}
        assert modes == dict.fromkeys(files, 0o600)
        folders = {name: _mode(state_dir / name) for name in ("", "run", "store", "transfers")}
        assert folders == dict.fromkeys(folders, 0o700)
    finally:
        running.stop()
    figures.record(tries=len(files) + len(folders), refused=len(files) + len(folders))


def test_wrong_passwords_back_off_per_address_and_the_wait_doubles(
    cluster: RunningCluster, figures: Figures
) -> None:
    set_owner_password(cluster)
    sessions = snapshot(cluster.state_dir, "web_sessions")
    answers = [_login(cluster, "not the password").status_code for _ in range(3)]
    assert answers == [401, 401, 401]
    # The fourth try waits, even with the right password, and says for how long.
    early = _login(cluster, OWNER_PASSWORD)
    error = error_of(early, 429)
    assert error["code"] == "limit_exceeded"
    assert error["details"]["limit"] == "login_failures_per_address"
    assert early.headers["Retry-After"] == "1"
    assert snapshot(cluster.state_dir, "web_sessions") == sessions
    tries, refused = 4, 4
    deadline = time.monotonic() + BACKOFF_DEADLINE_SECONDS
    while (answer := _login(cluster, "still not it")).status_code == 429:
        assert time.monotonic() < deadline
        tries, refused = tries + 1, refused + 1
        time.sleep(0.1)
    assert answer.status_code == 401
    doubled = _login(cluster, OWNER_PASSWORD)
    assert error_of(doubled, 429)["details"]["retry_after_seconds"] == 2
    assert doubled.headers["Retry-After"] == "2"
    waited_from = time.monotonic()
    while (answer := _login(cluster, OWNER_PASSWORD)).status_code == 429:
        assert time.monotonic() < deadline
        tries, refused = tries + 1, refused + 1
        time.sleep(0.1)
    assert answer.status_code == 201
    assert time.monotonic() - waited_from > 1.0
    assert snapshot(cluster.state_dir, "web_sessions") != sessions  # the one login that passed
    figures.record(tries=tries + 3, refused=refused + 1)


def test_a_password_change_ends_every_other_session_of_the_owner(
    cluster: RunningCluster, figures: Figures
) -> None:
    set_owner_password(cluster)
    first, _ = log_in(cluster)
    second, csrf = log_in(cluster)
    changed = second.put(
        "/api/v1/owner/password",
        json={"password": "a brand new passphrase"},
        headers={"X-CSRF-Token": csrf},
    )
    assert changed.status_code == 204, changed.text
    assert first.get("/api/v1/session").status_code == 401
    assert second.get("/api/v1/session").status_code == 200
    owner_sessions = query(cluster.state_dir, "SELECT id FROM web_sessions")
    assert len(owner_sessions) == 1
    # Through the control socket no session is kept.
    set_owner_password(cluster)
    assert second.get("/api/v1/session").status_code == 401
    assert query(cluster.state_dir, "SELECT id FROM web_sessions") == []
    figures.record(tries=2, refused=2)


def test_a_foreign_host_header_is_refused_on_every_route_and_changes_nothing(
    cluster: RunningCluster, figures: Figures
) -> None:
    set_owner_password(cluster)
    port = httpx.URL(cluster.url).port
    before = snapshot(cluster.state_dir, "web_sessions", "api_tokens", "audit_log")
    rebound = {"Host": f"rebound.example:{port}"}
    owner = cluster.owner()
    attempts = [
        cluster.client().get("/ui", headers=rebound),
        cluster.client().get("/login/anything", headers=rebound),
        cluster.client().get("/api/v1/no-such-route", headers=rebound),
        _login(cluster, OWNER_PASSWORD, **rebound),
        owner.get("/api/v1/models", headers=rebound),
        owner.post("/api/v1/tokens", json={"scopes": ["models:read"]}, headers=rebound),
        owner.get("/api/v1/models", headers={"Host": "127.0.0.1.rebound.example"}),
    ]
    for response in attempts:
        error = error_of(response, 400)
        assert error["code"] == "invalid_request"
        assert without_request_id(error["details"]) == {"field": "host"}
    assert snapshot(cluster.state_dir, "web_sessions", "api_tokens", "audit_log") == before
    for name in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert owner.get("/api/v1/models", headers={"Host": name}).status_code == 200
    figures.record(tries=len(attempts), refused=len(attempts))


def test_the_session_cookie_is_secure_when_the_cluster_is_published_over_https(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    def flags(response: httpx.Response) -> list[str]:
        assert response.status_code == 201, response.text
        return [part.strip() for part in response.headers["set-cookie"].lower().split(";")]

    published = start_cluster(tmp_path / "state", "--public-url", "https://ficc.example")
    try:
        set_owner_password(published)
        assert "secure" in flags(_login(published, OWNER_PASSWORD))
    finally:
        published.stop()
    set_owner_password(cluster)
    assert "secure" not in flags(_login(cluster, OWNER_PASSWORD))
    # No proxy header is believed: a forged X-Forwarded-Proto changes nothing.
    forged = _login(cluster, OWNER_PASSWORD, **{"X-Forwarded-Proto": "https"})
    assert "secure" not in flags(forged)


def test_the_ui_shows_nodes_only_to_a_credential_with_resources_read(
    cluster: RunningCluster, figures: Figures
) -> None:
    node = cluster.owner().get("/api/v1/nodes").json()["nodes"][0]
    row = f'<tr><th scope="row">{node["name"]}</th>'
    without = cluster.client(cluster.token("models:read")).get("/ui")
    assert without.status_code == 200
    assert row not in without.text
    allowed = cluster.client(cluster.token("resources:read")).get("/ui")
    assert allowed.status_code == 200
    assert row in allowed.text
    figures.record(tries=1, refused=1)


def test_the_offer_review_page_lists_nodes_only_to_a_credential_with_resources_read(
    tmp_path: Path, figures: Figures
) -> None:
    """G14, F13's sibling: the approval form's node picker names the hosts, so a
    federation:manage holder without resources:read gets the form without it."""
    with configured_pair(tmp_path) as (alpha, beta):
        offer = send_offer(alpha.owner(), beta, ["discover"])
        node = beta.owner().get("/api/v1/nodes").json()["nodes"][0]
        picker = f'<input type="checkbox" name="nodes" value="{node["id"]}"> {node["name"]}'
        path = f"/ui/p/default/offers/{offer['id']}"
        manage = ("federation:read", "federation:manage")
        without = beta.client(beta.token(*manage)).get(path)
        assert without.status_code == 200
        assert 'id="approve-form"' in without.text
        assert 'name="nodes"' not in without.text
        assert node["id"] not in without.text
        assert "needs the <code>resources:read</code> scope" in without.text
        allowed = beta.client(beta.token(*manage, "resources:read")).get(path)
        assert allowed.status_code == 200
        assert picker in allowed.text
    figures.record(tries=1, refused=1)


def test_a_forged_forwarded_address_does_not_escape_the_per_address_backoff(
    tmp_path: Path, figures: Figures
) -> None:
    """FICC trusts no proxy header: a local caller cannot rotate its apparent address."""
    running = start_cluster(tmp_path / "state")
    try:
        set_owner_password(running)
        forged = [{"X-Forwarded-For": f"198.51.100.{index}"} for index in range(4)]
        answers = [_login(running, "wrong", **headers).status_code for headers in forged[:3]]
        assert answers == [401, 401, 401]
        refused = _login(running, "wrong", **forged[3])
        assert error_of(refused, 429)["details"]["limit"] == "login_failures_per_address"
    finally:
        running.stop()
    figures.record(tries=4, refused=1)


def test_the_login_throttle_caps_tries_in_flight_and_backs_off_over_all_addresses(
    figures: Figures,
) -> None:
    """The rule itself, with times as arguments: many addresses together also back off."""
    throttle = LoginThrottle()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    throttle.begin("198.51.100.1", now)
    with pytest.raises(LimitExceeded) as same_address:
        throttle.begin("198.51.100.1", now)
    assert same_address.value.details["limit"] == "login_attempts_per_address"
    for index in range(2, MAX_LOGINS_IN_FLIGHT + 1):
        throttle.begin(f"198.51.100.{index}", now)
    with pytest.raises(LimitExceeded) as crowded:
        throttle.begin("198.51.100.99", now)
    assert crowded.value.details["limit"] == "logins_in_flight"
    for index in range(1, MAX_LOGINS_IN_FLIGHT + 1):
        throttle.end(f"198.51.100.{index}", now, succeeded=False)
    tries, refused = MAX_LOGINS_IN_FLIGHT + 2, 2
    for index in range(GLOBAL_FREE_FAILURES - MAX_LOGINS_IN_FLIGHT):
        address = f"203.0.113.{index}"
        throttle.begin(address, now)
        throttle.end(address, now, succeeded=False)
        tries += 1
    waits = []
    for index in range(4):
        address = f"192.0.2.{index}"
        with pytest.raises(LimitExceeded) as everyone:
            throttle.begin(address, now)
        assert everyone.value.details["limit"] == "login_failures"
        waits.append(everyone.value.details["retry_after_seconds"])
        now += timedelta(seconds=waits[-1])
        throttle.begin(address, now)
        throttle.end(address, now, succeeded=False)
        tries, refused = tries + 2, refused + 1
    assert waits == [1, 2, 4, 8]
    # A success clears the counts: the next address need not wait.
    now += timedelta(seconds=GLOBAL_MAX_BACKOFF_SECONDS)
    throttle.begin("192.0.2.100", now)
    throttle.end("192.0.2.100", now, succeeded=True)
    throttle.begin("192.0.2.101", now)
    figures.record(tries=tries + 2, refused=refused)
