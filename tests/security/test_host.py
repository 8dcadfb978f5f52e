"""The host boundary: state directory permissions, password logins under attack, the Host
header (DNS rebinding), the session cookie behind https and what /ui shows."""

from __future__ import annotations

import sqlite3
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
from ficc.base.times import format_time
from ficc.domain.accounts import (
    GLOBAL_FREE_FAILURES,
    MAX_LOGINS_IN_FLIGHT,
    PLAIN_HTTP_SESSION_LIFETIME_SECONDS,
    SESSION_LIFETIME_SECONDS,
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


def test_the_session_cookie_is_a_host_cookie_over_https_and_short_lived_over_plain_http(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    """G11: cookies are not isolated by port, so over plain HTTP any server on another port of
    the host name receives the session cookie. Behind https the cookie is ``__Host-`` (Secure,
    host-only, path /); over plain HTTP the session lasts an hour, not twelve."""

    def cookie(response: httpx.Response) -> dict[str, str]:
        assert response.status_code in (201, 303), response.text
        name_value, *attributes = response.headers["set-cookie"].split(";")
        name, _, value = name_value.strip().partition("=")
        parts = dict(part.strip().lower().partition("=")[::2] for part in attributes)
        return {"name": name, "value": value, **parts}

    def lifetimes(state_dir: Path) -> list[float]:
        rows = query(state_dir, "SELECT created_at, expires_at FROM web_sessions")
        return sorted(
            (
                datetime.fromisoformat(row["expires_at"])
                - datetime.fromisoformat(row["created_at"])
            ).total_seconds()
            for row in rows
        )

    published = start_cluster(tmp_path / "state", "--public-url", "https://ficc.example")
    try:
        set_owner_password(published)
        secure = cookie(_login(published, OWNER_PASSWORD))
        assert secure["name"] == "__Host-ficc_session"
        assert {"secure", "httponly"} <= set(secure)
        assert "domain" not in secure
        assert (secure["path"], secure["max-age"]) == ("/", str(SESSION_LIFETIME_SECONDS))
        assert lifetimes(published.state_dir) == [SESSION_LIFETIME_SECONDS]
        host_cookie = {"Cookie": f"__Host-ficc_session={secure['value']}"}
        assert published.client(**host_cookie).get("/api/v1/session").status_code == 200
        # Only the __Host- cookie is read there: one set by a plain-HTTP page is not.
        plain_cookie = {"Cookie": f"ficc_session={secure['value']}"}
        assert published.client(**plain_cookie).get("/api/v1/session").status_code == 401
        # The console's logout drops the cookie by the name it was set under.
        csrf = published.client(**host_cookie).get("/api/v1/session").json()["csrf_token"]
        out = published.client(**host_cookie, **{"X-CSRF-Token": csrf}).post("/ui/logout")
        assert out.status_code == 204, out.text
        assert out.headers["set-cookie"].startswith('__Host-ficc_session=""')
        assert "secure" in out.headers["set-cookie"].lower()
    finally:
        published.stop()
    set_owner_password(cluster)  # through the socket: every earlier session ends
    plain = cookie(_login(cluster, OWNER_PASSWORD))
    assert plain["name"] == "ficc_session"
    assert "secure" not in plain
    assert plain["max-age"] == str(PLAIN_HTTP_SESSION_LIFETIME_SECONDS)
    link = cluster.owner().post("/api/v1/login-links").json()["url"]
    opened = cookie(cluster.client().get(link, follow_redirects=False))
    assert (opened["name"], opened["max-age"]) == (
        "ficc_session",
        str(PLAIN_HTTP_SESSION_LIFETIME_SECONDS),
    )
    assert lifetimes(cluster.state_dir) == [PLAIN_HTTP_SESSION_LIFETIME_SECONDS] * 2
    # No proxy header is believed: a forged X-Forwarded-Proto changes nothing.
    forged = cookie(_login(cluster, OWNER_PASSWORD, **{"X-Forwarded-Proto": "https"}))
    assert forged["name"] == "ficc_session"
    assert "secure" not in forged


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
        address = f"203.0.113.{index}"  # each has failed once: the global wait holds it (G9)
        with pytest.raises(LimitExceeded) as everyone:
            throttle.begin(address, now)
        assert everyone.value.details["limit"] == "login_failures"
        waits.append(everyone.value.details["retry_after_seconds"])
        now += timedelta(seconds=waits[-1])
        throttle.begin(address, now)
        throttle.end(address, now, succeeded=False)
        tries, refused = tries + 2, refused + 1
    assert waits == [1, 2, 4, 8]
    # A success clears the counts: an address that has failed need not wait either.
    throttle.begin("192.0.2.100", now)
    throttle.end("192.0.2.100", now, succeeded=True)
    throttle.begin("203.0.113.10", now)
    figures.record(tries=tries + 2, refused=refused)


def test_wrong_passwords_from_many_addresses_never_lock_the_owner_out(
    tmp_path: Path, figures: Figures
) -> None:
    """G9: the global backoff after wrong tries from many loopback addresses holds those
    addresses; the owner's own address, which never failed, logs in at once."""
    running = start_cluster(tmp_path / "state")
    try:
        set_owner_password(running)

        def from_address(address: str, password: str) -> httpx.Response:
            transport = httpx.HTTPTransport(local_address=address)
            with httpx.Client(
                transport=transport, base_url=running.url, timeout=30, trust_env=False
            ) as client:
                return client.post(
                    "/api/v1/session", json={"username": "owner", "password": password}
                )

        # Enough wrong tries that the global wait is at its cap (a minute): no race with it.
        attackers = [f"127.0.0.{index}" for index in range(2, GLOBAL_FREE_FAILURES + 8)]
        answers = [from_address(address, "wrong").status_code for address in attackers]
        assert answers == [401] * len(attackers)
        again = from_address(attackers[0], "wrong")
        assert error_of(again, 429)["details"]["limit"] == "login_failures"
        assert from_address("127.0.0.1", OWNER_PASSWORD).status_code == 201
    finally:
        running.stop()
    figures.record(tries=len(attackers) + 2, refused=1)


def test_serve_purges_expired_sessions_and_used_or_expired_login_links_at_start(
    state_dir: Path, figures: Figures
) -> None:
    """F17: rows that can never authenticate again do not pile up; a live session stays."""
    assert ficc("init", state_dir=state_dir).returncode == 0
    owner_id = query(state_dir, "SELECT id FROM users WHERE is_owner")[0]["id"]
    now = datetime.now(UTC)

    def at(hours: float) -> str:
        return format_time(now + timedelta(hours=hours))

    connection = sqlite3.connect(state_dir / "ficc.db")
    with connection:
        for name, expires_at in (("expired", at(-1)), ("live", at(1))):
            connection.execute(
                "INSERT INTO web_sessions VALUES (?, ?, ?, 'csrf', ?, ?)",
                (f"session_{name}", owner_id, f"s-{name}", at(-2), expires_at),
            )
        for name, expires_at, used_at in (
            ("expired", at(-1), None),
            ("used", at(1), at(-1)),
            ("open", at(1), None),
        ):
            connection.execute(
                "INSERT INTO login_links VALUES (?, ?, ?, ?, ?, ?)",
                (f"link_{name}", owner_id, f"l-{name}", at(-2), expires_at, used_at),
            )
    connection.close()
    running = start_cluster(state_dir)
    try:
        sessions = query(state_dir, "SELECT id FROM web_sessions")
        links = query(state_dir, "SELECT id FROM login_links")
    finally:
        running.stop()
    assert (sessions, links) == ([{"id": "session_live"}], [{"id": "link_open"}])
    figures.record(purged=3, kept=2)
