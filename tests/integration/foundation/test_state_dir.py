"""`ficc init` and `ficc serve` on a real state directory."""

from __future__ import annotations

import hashlib
import json
import signal
import stat
from pathlib import Path

from tests.support.cluster import ficc, start_cluster


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_init_creates_the_key_and_owner_token_readable_by_the_owner_only(state_dir: Path) -> None:
    result = ficc("init", "--label", "alpha", state_dir=state_dir)
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["created"] is True
    assert output["label"] == "alpha"
    assert _mode(state_dir) == 0o700
    assert _mode(state_dir / "cluster.key") == 0o600
    assert _mode(state_dir / "owner.token") == 0o600
    assert len((state_dir / "cluster.key").read_bytes()) == 32
    assert (state_dir / "owner.token").read_text().startswith("ficc_")


def test_running_init_again_changes_nothing(state_dir: Path) -> None:
    assert ficc("init", state_dir=state_dir).returncode == 0
    before = {name: _digest(state_dir / name) for name in ("cluster.key", "owner.token", "ficc.db")}
    again = ficc("init", "--label", "other", state_dir=state_dir)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is False
    assert json.loads(again.stdout)["label"] != "other"
    after = {name: _digest(state_dir / name) for name in before}
    assert after == before


def test_serve_writes_server_json_opens_a_private_socket_and_cleans_up_on_sigterm(
    state_dir: Path,
) -> None:
    running = start_cluster(state_dir)
    try:
        info = json.loads((state_dir / "server.json").read_text())
        assert info["url"] == running.url
        assert info["pid"] == running.process.pid
        assert _mode(state_dir / "ficc.sock") == 0o600
        assert running.owner().get("/api/v1/projects").status_code == 200
    finally:
        code = running.stop(signal.SIGTERM)
    assert code == 0
    assert not (state_dir / "server.json").exists()
    assert not (state_dir / "ficc.sock").exists()


def test_serve_stops_cleanly_on_sigint(state_dir: Path) -> None:
    running = start_cluster(state_dir)
    assert running.stop(signal.SIGINT) == 0
    assert not (state_dir / "ficc.sock").exists()


def test_serve_on_an_uninitialised_directory_initialises_it_first(state_dir: Path) -> None:
    assert not state_dir.exists()
    running = start_cluster(state_dir)
    try:
        assert (state_dir / "cluster.key").exists()
        assert running.owner().get("/api/v1/nodes").status_code == 200
    finally:
        running.stop()


def test_a_command_without_a_running_server_says_how_to_start_one_and_exits_3(
    state_dir: Path,
) -> None:
    assert ficc("init", state_dir=state_dir).returncode == 0
    result = ficc("nodes", state_dir=state_dir)
    assert result.returncode == 3
    assert "ficc serve" in result.stderr


def test_a_usage_error_exits_2(state_dir: Path) -> None:
    result = ficc("token-create", state_dir=state_dir)
    assert result.returncode == 2
