"""A minted token is never the local owner: each escalation a project token could try is
refused with 403 and changes nothing (credentials, owner, companion, catalogue, audit).

The hostile token holds every one of the 13 local scopes, but only for project ``b`` and for a
minute: before the owner was defined as exactly the init token, it counted as the owner.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.security.conftest import Figures
from tests.support.authority import (
    ACCOUNT_TABLES,
    error_of,
    log_in,
    owner_token_id,
    query,
    set_owner_password,
    snapshot,
    token_row,
    without_request_id,
)
from tests.support.cluster import RunningCluster, ficc, start_cluster

from ficc.domain.scopes import LOCAL_SCOPES

GUARDED = (*ACCOUNT_TABLES, "audit_log")


@pytest.fixture(scope="module")
def hostile(cluster: RunningCluster) -> dict[str, Any]:
    """Projects ``b`` and ``c``, and a 60-second token with every scope in ``b`` only."""
    owner = cluster.owner()
    for name in ("b", "c"):
        assert owner.post("/api/v1/projects", json={"name": name}).status_code == 201
    response = owner.post(
        "/api/v1/tokens",
        json={"scopes": list(LOCAL_SCOPES), "projects": ["b"], "lifetime": 60},
    )
    assert response.status_code == 201, response.text
    token = response.json()
    return {"id": token["id"], "client": cluster.client(token["token"], **{"X-FICC-Project": "b"})}


def _refused_and_nothing_changed(
    cluster: RunningCluster, response_of: Any, figures: Figures
) -> dict[str, Any]:
    before = snapshot(cluster.state_dir, *GUARDED)
    response: httpx.Response = response_of()
    error = error_of(response, 403)
    assert error["code"] == "forbidden"
    assert without_request_id(error["details"]) == {"requires": "local_owner"}
    assert snapshot(cluster.state_dir, *GUARDED) == before
    figures.record(tries=1, refused=1)
    return error


def test_a_project_token_with_every_scope_cannot_create_a_login_link(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    _refused_and_nothing_changed(
        cluster, lambda: hostile["client"].post("/api/v1/login-links"), figures
    )


def test_a_project_token_with_every_scope_cannot_set_the_owner_password(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    _refused_and_nothing_changed(
        cluster,
        lambda: hostile["client"].put(
            "/api/v1/owner/password", json={"password": "attacker chosen password"}
        ),
        figures,
    )


@pytest.mark.parametrize("secret_file", ["cluster.key", "owner.token"])
def test_a_project_token_with_every_scope_cannot_import_a_state_file_by_path(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures, secret_file: str
) -> None:
    path = str(cluster.state_dir / secret_file)
    _refused_and_nothing_changed(
        cluster,
        lambda: hostile["client"].post("/api/v1/models", json={"name": "loot", "paths": [path]}),
        figures,
    )


def test_a_project_token_with_every_scope_cannot_reconfigure_the_companion(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures, tmp_path: Path
) -> None:
    _refused_and_nothing_changed(
        cluster,
        lambda: hostile["client"].put(
            "/api/v1/federation/configuration",
            json={"agent_directory": str(tmp_path / "agent"), "label": "hijacked"},
        ),
        figures,
    )


def test_the_init_token_alone_is_marked_owner_and_may_do_what_only_the_owner_may(
    cluster: RunningCluster, hostile: dict[str, Any]
) -> None:
    owner_id = owner_token_id(cluster.state_dir)
    marked = query(cluster.state_dir, "SELECT id FROM api_tokens WHERE owner")
    assert marked == [{"id": owner_id}]
    link = cluster.owner().post("/api/v1/login-links")
    assert link.status_code == 201, link.text
    assert cluster.owner().get("/api/v1/session").json()["local_owner"] is True
    assert hostile["client"].get("/api/v1/session").json()["local_owner"] is False
    assert token_row(cluster.state_dir, owner_id)["created_by"] is None


def test_a_token_records_the_token_that_minted_it(
    cluster: RunningCluster, hostile: dict[str, Any]
) -> None:
    minted = hostile["client"].post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "projects": ["b"]}
    )
    assert minted.status_code == 201, minted.text
    row = token_row(cluster.state_dir, minted.json()["id"])
    assert row["created_by"] == hostile["id"]
    assert row["owner"] == 0
    via_socket = ficc("token-create", "--scope", "models:read", state_dir=cluster.state_dir)
    assert via_socket.returncode == 0, via_socket.stderr
    socket_id = json.loads(via_socket.stdout)["id"]
    assert token_row(cluster.state_dir, socket_id)["created_by"] is None


def test_a_project_token_cannot_revoke_the_owner_token(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    owner_id = owner_token_id(cluster.state_dir)
    before = snapshot(cluster.state_dir, *GUARDED)
    response = hostile["client"].delete(f"/api/v1/tokens/{owner_id}")
    assert error_of(response, 404)["code"] == "not_found"
    assert snapshot(cluster.state_dir, *GUARDED) == before
    assert cluster.owner().get("/api/v1/projects").status_code == 200
    figures.record(tries=1, refused=1)


def test_a_project_token_cannot_revoke_another_projects_token_but_may_revoke_its_own(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    other = cluster.owner().post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "projects": ["c"]}
    )
    straddling = cluster.owner().post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "projects": ["b", "c"]}
    )
    unknown_id = "token_00000000000000000000000000000000"
    unknown = error_of(hostile["client"].delete(f"/api/v1/tokens/{unknown_id}"), 404)
    before = snapshot(cluster.state_dir, *GUARDED)
    refused = 0
    for victim in (other.json(), straddling.json()):
        error = error_of(hostile["client"].delete(f"/api/v1/tokens/{victim['id']}"), 404)
        # Answered exactly as an unknown ID: the refusal tells nothing of the token.
        assert without_request_id(error["details"]) == without_request_id(unknown["details"])
        assert error["code"] == unknown["code"]
        assert error["message"] == unknown["message"].replace(unknown_id, victim["id"])
        refused += 1
        still = cluster.client(victim["token"], **{"X-FICC-Project": "c"}).get("/api/v1/models")
        assert still.status_code == 200
    assert snapshot(cluster.state_dir, *GUARDED) == before
    own = cluster.owner().post(
        "/api/v1/tokens", json={"scopes": ["models:read"], "projects": ["b"]}
    )
    assert hostile["client"].delete(f"/api/v1/tokens/{own.json()['id']}").status_code == 204
    assert token_row(cluster.state_dir, own.json()["id"])["revoked_at"] is not None
    figures.record(tries=2, refused=refused)


def test_a_project_reader_does_not_see_cluster_wide_audit_rows(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    set_owner_password(cluster)
    log_in(cluster)  # a session.created row, cluster-wide
    cluster.owner().post("/api/v1/login-links")  # login_link.created, cluster-wide
    cluster_wide = query(cluster.state_dir, "SELECT seq FROM audit_log WHERE project IS NULL")
    assert cluster_wide, "the log should hold cluster-wide rows"
    before = snapshot(cluster.state_dir, *GUARDED)
    seen = hostile["client"].get("/api/v1/federation/audit", params={"limit": 500})
    assert seen.status_code == 200
    entries = seen.json()["entries"]
    assert [entry for entry in entries if entry["project"] != "b"] == []
    leaked = {"token.created", "session.created", "login_link.created", "password.set"}
    assert not leaked & {entry["action"] for entry in entries}
    owner_view = cluster.client(cluster.owner_token, **{"X-FICC-Project": "b"}).get(
        "/api/v1/federation/audit", params={"limit": 500}
    )
    assert leaked <= {entry["action"] for entry in owner_view.json()["entries"]}
    assert snapshot(cluster.state_dir, *GUARDED) == before
    figures.record(tries=len(cluster_wide), refused=len(cluster_wide))


def test_serve_marks_the_owner_token_of_a_database_made_before_the_mark(
    state_dir: Path,
) -> None:
    """An existing database's init token: serve adopts the token written in owner.token."""
    assert ficc("init", state_dir=state_dir).returncode == 0
    connection = sqlite3.connect(state_dir / "ficc.db")
    with connection:
        connection.execute("UPDATE api_tokens SET owner = 0")
    connection.close()
    running = start_cluster(state_dir)
    try:
        owner_id = owner_token_id(state_dir)
        assert token_row(state_dir, owner_id)["owner"] == 1
        assert running.owner().get("/api/v1/session").json()["local_owner"] is True
        minted = running.owner().post(
            "/api/v1/tokens", json={"scopes": list(LOCAL_SCOPES), "projects": ["default"]}
        )
        assert token_row(state_dir, minted.json()["id"])["owner"] == 0
        assert token_row(state_dir, minted.json()["id"])["created_by"] == owner_id
    finally:
        running.stop()


def test_a_project_token_lists_only_the_tokens_it_may_revoke_and_never_a_secret(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    owner = cluster.owner()
    minted = {}
    for projects in (["b"], ["c"], ["b", "c"]):
        response = owner.post(
            "/api/v1/tokens", json={"scopes": ["models:read"], "projects": projects}
        )
        assert response.status_code == 201, response.text
        minted[tuple(projects)] = response.json()
    listed = hostile["client"].get("/api/v1/tokens")
    assert listed.status_code == 200, listed.text
    seen = {token["id"] for token in listed.json()["tokens"]}
    assert minted[("b",)]["id"] in seen
    assert hostile["id"] in seen
    hidden = {minted[("c",)]["id"], minted[("b", "c")]["id"], owner_token_id(cluster.state_dir)}
    assert not seen & hidden
    everything = owner.get("/api/v1/tokens").json()["tokens"]
    assert hidden <= {token["id"] for token in everything}
    for token in everything:
        assert set(token) == {
            "id", "state", "scopes", "projects", "owner", "created_by",
            "created_at", "expires_at", "revoked_at",
            "peers", "services", "tokens", "tokens_per_minute", "requests_per_minute",
            "used", "remaining",
        }  # fmt: skip
    assert all(issued["token"] not in listed.text for issued in minted.values())
    figures.record(tries=len(everything), refused=len(hidden))


def test_a_minted_token_never_outlives_its_creator_and_falls_with_it(
    cluster: RunningCluster, hostile: dict[str, Any], figures: Figures
) -> None:
    """G4: the 60-second token asks for a token that never expires and one that lasts a year;
    both expire with it. The owner revokes a parent: its child and grandchild stop working."""
    creator_expiry = token_row(cluster.state_dir, hostile["id"])["expires_at"]
    minted = [
        hostile["client"].post(
            "/api/v1/tokens",
            json={"scopes": ["tokens:manage", "models:read"], "projects": ["b"], **lifetime},
        )
        for lifetime in ({}, {"lifetime": 365 * 86_400})
    ]
    assert [response.status_code for response in minted] == [201, 201]
    for response in minted:
        assert token_row(cluster.state_dir, response.json()["id"])["expires_at"] == creator_expiry

    owner = cluster.owner()
    parent = owner.post(
        "/api/v1/tokens", json={"scopes": ["tokens:manage", "models:read"], "projects": ["b"]}
    ).json()
    as_project = {"X-FICC-Project": "b"}
    child = (
        cluster.client(parent["token"], **as_project)
        .post(
            "/api/v1/tokens", json={"scopes": ["tokens:manage", "models:read"], "projects": ["b"]}
        )
        .json()
    )
    grandchild = (
        cluster.client(child["token"], **as_project)
        .post("/api/v1/tokens", json={"scopes": ["models:read"], "projects": ["b"]})
        .json()
    )
    family = [parent, child, grandchild]
    for token in family:
        assert cluster.client(token["token"], **as_project).get("/api/v1/models").status_code == 200
    assert owner.delete(f"/api/v1/tokens/{parent['id']}").status_code == 204
    answers = [
        cluster.client(token["token"], **as_project).get("/api/v1/models").status_code
        for token in family
    ]
    assert answers == [401, 401, 401]
    assert all(token_row(cluster.state_dir, token["id"])["revoked_at"] for token in family)
    figures.record(tries=len(family) + len(minted), refused=len(family) + len(minted))
