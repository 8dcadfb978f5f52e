"""`ficc backup` of a grantor while it serves writes, `ficc restore` into a new directory: the
restored cluster has the same identity, models and pairings and still serves its peer."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.federation import API, configure, identity, ok, pair, refresh, wait_for
from tests.support.remote import hypernet_address

from ficc.adapters.blobstore import BlobStore


class Writer(threading.Thread):
    """Creates projects on a cluster one after another until stopped; names what was created."""

    def __init__(self, cluster: RunningCluster) -> None:
        super().__init__(daemon=True)
        self.client = cluster.client(cluster.owner_token)
        self.created: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        index = 0
        while not self.stopping.is_set():
            name = f"busy-{index}"
            if self.client.post("/api/v1/projects", json={"name": name}).status_code == 201:
                self.created.append(name)
            index += 1


@pytest.fixture
def grantor_and_peer(tmp_path: Path) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    alpha = start_cluster(tmp_path / "alpha")
    beta = start_cluster(tmp_path / "beta")
    try:
        yield alpha, beta
    finally:
        alpha.stop()
        beta.stop()


def _discover(alpha: RunningCluster, peer: str) -> dict[str, Any]:
    body = {"operation": "discover", "body": {}}
    response = alpha.owner().post(f"{API}/peers/{peer}/request", json=body)
    return response.json() if response.status_code == 200 else {}


def _run(*args: str, state_dir: Path) -> dict[str, Any]:
    done = ficc(*args, state_dir=state_dir)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_cluster_backed_up_while_serving_is_restored_with_its_identity_models_and_pairings(
    grantor_and_peer: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    alpha, beta = grantor_and_peer
    configure(alpha, "alpha")
    configure(beta, "beta")
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"GGUF" + os.urandom(300_000))
    model = _run("model-add", "--name", "kept", str(weights), state_dir=beta.state_dir)
    pairing = pair(alpha, beta)
    ok(refresh(alpha.owner(), pairing.requester_peer, grant=pairing.grant))
    before = _discover(alpha, pairing.requester_peer)
    assert before
    beta_identity = identity(beta)
    beta_address = hypernet_address(beta)
    models_before = ok(beta.owner().get("/api/v1/models"))

    writer = Writer(beta)
    writer.start()
    try:
        wait_for(lambda: len(writer.created) >= 5, what="writes before the backup")
        created_before = list(writer.created)
        backup_dir = tmp_path / "backup"
        summary = _run("backup", "--to", str(backup_dir), state_dir=beta.state_dir)
        assert len(writer.created) > len(created_before), "the writes went on during the backup"
    finally:
        writer.stopping.set()
        writer.join(timeout=30)
    assert (summary["blobs"], summary["hypernet_key"]) == (1, True)
    manifest = json.loads((backup_dir / "manifest.json").read_text())
    assert manifest["cluster_key"] == beta_identity["cluster_key"]
    with sqlite3.connect(backup_dir / "ficc.db") as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        copied = {row[0] for row in copy.execute("SELECT name FROM projects")}
    copy.close()
    assert set(created_before) <= copied
    assert copied <= {*writer.created, "default"}
    for secret in ("cluster.key", "owner.token", "agent/hypernet.key"):
        assert (backup_dir / secret).stat().st_mode & 0o077 == 0, secret

    beta.stop()
    restored_dir = tmp_path / "restored"
    restored_summary = _run("restore", "--from", str(backup_dir), state_dir=restored_dir)
    assert restored_summary["blobs"] == 1
    restored = start_cluster(restored_dir, "--hypernet-bind", beta_address)
    try:
        assert wait_for(lambda: identity(restored)["hypernet_id"], what="the companion")
        restored_identity = identity(restored)
        for key in ("cluster_key", "hypernet_id", "label"):
            assert restored_identity[key] == beta_identity[key], key
        assert restored.owner_token == beta.owner_token
        assert ok(restored.owner().get("/api/v1/models")) == models_before
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
        blob = restored_dir / "store" / "blobs" / digest[:2] / digest
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest
        shown = ok(restored.owner().get(f"/api/v1/models/{model['id']}"))
        assert shown["id"] == model["id"]
        # alpha still holds its grant: the restored grantor answers it.
        after = wait_for(
            lambda: _discover(alpha, pairing.requester_peer), what="the restored grantor"
        )
        assert after == before
    finally:
        restored.stop()


def test_restore_refuses_a_used_directory_and_a_corrupt_blob(tmp_path: Path) -> None:
    source = start_cluster(tmp_path / "source")
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"GGUF" + os.urandom(4096))
    try:
        _run("model-add", "--name", "m", str(weights), state_dir=source.state_dir)
    finally:
        source.stop()
    backup_dir = tmp_path / "backup"
    _run("backup", "--to", str(backup_dir), state_dir=source.state_dir)

    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    refused = ficc("restore", "--from", str(backup_dir), state_dir=used)
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["details"]["field"] == "state_dir"
    assert sorted(p.name for p in used.iterdir()) == ["keep.txt"]

    again = ficc("backup", "--to", str(backup_dir), state_dir=source.state_dir)
    assert again.returncode == 1
    assert json.loads(again.stderr)["error"]["details"]["field"] == "to"

    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    blob = backup_dir / "store" / "blobs" / digest[:2] / digest
    blob.chmod(0o600)
    blob.write_bytes(b"GGUF" + b"\0" * 4096)
    target = tmp_path / "target"
    corrupt = ficc("restore", "--from", str(backup_dir), state_dir=target)
    assert corrupt.returncode == 1
    assert "sha256" in corrupt.stderr.lower()
    assert not target.exists()


def _modes_open_to_others(root: Path) -> dict[str, str]:
    """Every folder under ``root`` (and ``root``) that group or others may enter or list, and
    every file that is neither private (0600) nor a read-only blob (0444), with its mode."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        is_open = mode & 0o077 != 0 if path.is_dir() else mode not in (0o600, 0o444)
        if is_open:
            found[str(path.relative_to(root))] = oct(mode)
    return found


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    """The umask a careless shell leaves; the ficc processes started meanwhile inherit it."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def test_a_backup_into_an_existing_open_directory_and_its_restore_are_private(
    tmp_path: Path,
) -> None:
    """G10: `backup --to` an existing empty 0755 directory under umask 022 used to keep the
    directory open and write the blobs' folders 0755, so any local user could read the models;
    both commands now work under umask 077 and the destination becomes 0700."""
    state_dir = tmp_path / "state"
    weights = tmp_path / "weights.gguf"
    weights.write_bytes(b"GGUF" + os.urandom(4096))
    with _umask(0o022):
        assert ficc("init", state_dir=state_dir).returncode == 0
        BlobStore(state_dir / "store").import_file(weights)
        backup_dir = tmp_path / "backup"
        backup_dir.mkdir()
        backup_dir.chmod(0o755)
        summary = _run("backup", "--to", str(backup_dir), state_dir=state_dir)
        assert summary["blobs"] == 1
        assert _modes_open_to_others(backup_dir) == {}
        assert stat.S_IMODE(backup_dir.stat().st_mode) == 0o700
        restored = tmp_path / "restored"
        assert _run("restore", "--from", str(backup_dir), state_dir=restored)["blobs"] == 1
        assert _modes_open_to_others(restored) == {}
