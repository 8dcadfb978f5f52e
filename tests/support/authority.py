"""Helpers for the local-authority tests: rows read straight from a cluster's database, and
browser sessions opened with the owner's password."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import httpx
from tests.support.cluster import RunningCluster, ficc

OWNER_PASSWORD = "correct horse battery staple"

ACCOUNT_TABLES = (
    "api_tokens",
    "login_links",
    "web_sessions",
    "users",
    "cluster_settings",
    "models",
)
"""What an escalation through a token would change: credentials, the owner, the companion's
configuration (cluster_settings) and the catalogue."""


def query(state_dir: Path, sql: str, *params: object) -> list[dict[str, Any]]:
    """Rows of a read-only query on the cluster's database (WAL: the server keeps running)."""
    connection = sqlite3.connect(f"file:{state_dir / 'ficc.db'}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in connection.execute(sql, params).fetchall()]
    finally:
        connection.close()


def snapshot(state_dir: Path, *tables: str) -> dict[str, list[str]]:
    """Every row of each table, in a stable order, to compare before and after a refusal."""
    every_row = {table: f"SELECT * FROM {table}" for table in tables}  # noqa: S608
    return {
        table: sorted(repr(sorted(row.items())) for row in query(state_dir, sql))
        for table, sql in every_row.items()
    }


def token_row(state_dir: Path, token_id: str) -> dict[str, Any]:
    found = query(state_dir, "SELECT * FROM api_tokens WHERE id = ?", token_id)
    assert len(found) == 1, f"no token {token_id}"
    return found[0]


def owner_token_id(state_dir: Path) -> str:
    """The ID of the token ``ficc init`` wrote to owner.token (found by its digest)."""
    secret = (state_dir / "owner.token").read_text().strip()
    digest = hashlib.sha256(secret.encode()).hexdigest()
    found = query(state_dir, "SELECT id FROM api_tokens WHERE secret_hash = ?", digest)
    assert len(found) == 1, found
    return str(found[0]["id"])


def set_owner_password(cluster: RunningCluster, password: str = OWNER_PASSWORD) -> None:
    """Through the control socket, as the CLI does."""
    result = ficc("set-password", "--password-stdin", state_dir=cluster.state_dir, stdin=password)
    assert result.returncode == 0, result.stderr


def log_in(cluster: RunningCluster, password: str = OWNER_PASSWORD) -> tuple[httpx.Client, str]:
    """A browser with an owner session, and the session's CSRF token."""
    browser = cluster.client()
    response = browser.post("/api/v1/session", json={"username": "owner", "password": password})
    assert response.status_code == 201, response.text
    return browser, str(response.json()["csrf_token"])


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The error envelope of a refusal with ``status``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    return dict(body["error"])


def without_request_id(details: dict[str, Any]) -> dict[str, Any]:
    """An error's details less the request ID every error carries (it differs each time)."""
    return {key: value for key, value in details.items() if key != "request_id"}
