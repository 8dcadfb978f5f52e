"""The companion: configured once, restored after a restart, failing visibly, never fatally."""

from __future__ import annotations

import signal
import stat
from pathlib import Path

import httpx
from tests.support.cluster import start_cluster
from tests.support.federation import ok, overview


def _configure(client: httpx.Client, directory: Path, label: str = "alpha") -> httpx.Response:
    return client.put(
        "/api/v1/federation/configuration",
        json={"agent_directory": str(directory), "label": label},
    )


def test_the_companion_comes_back_after_a_restart_with_the_same_identity_and_port(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    cluster = start_cluster(state)
    try:
        configured = ok(_configure(cluster.owner(), tmp_path / "agent"))
        before = configured["companion"]
        assert before["state"] == "running"
        assert stat.S_IMODE((tmp_path / "agent").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "agent" / "hypernet.key").stat().st_mode) == 0o600
    finally:
        assert cluster.stop(signal.SIGTERM) == 0
    again = start_cluster(state)
    try:
        after = overview(again.owner())
        assert after["companion"]["state"] == "running"
        assert after["companion"]["hypernet_id"] == before["hypernet_id"]
        assert after["identity"]["cluster_key"] == configured["identity"]["cluster_key"]
        assert after["identity"]["label"] == "alpha"
        v4 = [a for a in before["addresses"] if a.startswith("127.")]
        assert v4
        assert v4[0] in after["companion"]["addresses"]
    finally:
        again.stop()


def test_a_key_file_readable_by_others_fails_the_companion_and_the_api_keeps_serving(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    key = agent / "hypernet.key"
    key.write_bytes(bytes(32))
    key.chmod(0o644)
    cluster = start_cluster(tmp_path / "state")
    try:
        shown = ok(_configure(cluster.owner(), agent))["companion"]
        assert shown["state"] == "failed"
        assert shown["error"]
        assert "hypernet.key" in shown["error"]
        assert str(tmp_path) not in shown["error"]
        assert cluster.owner().get("/api/v1/nodes").status_code == 200
        refused = cluster.owner().post(
            "/api/v1/federation/offers", json={"service": "a" * 64, "scopes": ["discover"]}
        )
        assert refused.status_code == 502
        assert refused.json()["error"]["code"] == "peer_unreachable"
    finally:
        cluster.stop()


def test_a_corrupt_key_file_fails_the_companion_with_a_clear_error(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    key = agent / "hypernet.key"
    key.write_bytes(b"not a key")
    key.chmod(0o600)
    cluster = start_cluster(tmp_path / "state")
    try:
        shown = ok(_configure(cluster.owner(), agent))["companion"]
        assert shown["state"] == "failed"
        assert "hypernet.key" in shown["error"]
    finally:
        cluster.stop()


def test_configuring_needs_the_local_owner_and_an_absolute_directory(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path / "state")
    try:
        relative = cluster.owner().put(
            "/api/v1/federation/configuration", json={"agent_directory": "agent"}
        )
        assert relative.status_code == 400
        assert relative.json()["error"]["details"]["field"] == "agent_directory"
        token = cluster.token("federation:manage", "federation:read")
        narrowed = cluster.client(token).put(
            "/api/v1/federation/configuration", json={"agent_directory": str(tmp_path / "a")}
        )
        assert narrowed.status_code == 403
        assert overview(cluster.owner())["companion"]["configured"] is False
    finally:
        cluster.stop()
