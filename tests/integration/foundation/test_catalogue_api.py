"""The model catalogue through the API and the CLI, with real files and a real blob store."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import rfc8785
from tests.support.cluster import RunningCluster, ficc


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_a_multi_file_model_round_trips_with_its_canonical_digest(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    weights = _write(tmp_path / "weights.gguf", os.urandom(3 * 1024 * 1024 + 17))
    config = _write(tmp_path / "config.json", b'{"layers": 2}')
    result = ficc(
        "model-add",
        "--name",
        "tiny",
        str(tmp_path / "weights.gguf"),
        str(tmp_path / "config.json"),
        state_dir=cluster.state_dir,
    )
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)
    manifest = model["manifest"]
    assert manifest["format"] == "gguf"
    assert [entry["path"] for entry in manifest["files"]] == ["config.json", "weights.gguf"]
    assert {entry["sha256"] for entry in manifest["files"]} == {weights, config}
    assert model["sha256"] == hashlib.sha256(rfc8785.dumps(manifest)).hexdigest()
    for entry in manifest["files"]:
        blob = cluster.state_dir / "store" / "blobs" / entry["sha256"][:2] / entry["sha256"]
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == entry["sha256"]
    shown = cluster.owner().get(f"/api/v1/models/{model['id']}").json()
    assert shown["manifest"] == manifest
    listed = cluster.owner().get("/api/v1/models").json()["models"]
    assert model["id"] in [entry["id"] for entry in listed]


def test_deleting_a_model_removes_it_and_its_unshared_blobs(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    digest = _write(tmp_path / "only.bin", os.urandom(4096))
    model = json.loads(
        ficc(
            "model-add", "--name", "gone", str(tmp_path / "only.bin"), state_dir=cluster.state_dir
        ).stdout
    )
    blob = cluster.state_dir / "store" / "blobs" / digest[:2] / digest
    assert blob.exists()
    assert cluster.owner().delete(f"/api/v1/models/{model['id']}").status_code == 204
    assert cluster.owner().get(f"/api/v1/models/{model['id']}").status_code == 404
    assert not blob.exists()


def test_a_path_with_dot_dot_is_refused_and_nothing_is_recorded(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "real.bin", b"x" * 10)
    before = cluster.owner().get("/api/v1/models").json()["models"]
    response = cluster.owner().post(
        "/api/v1/models",
        json={"name": "evil", "paths": [str(tmp_path / "sub" / ".." / "real.bin")]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "paths[0]"
    assert cluster.owner().get("/api/v1/models").json()["models"] == before


def test_a_directory_or_missing_file_is_refused_naming_the_path_index(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    _write(tmp_path / "a.bin", b"a")
    response = cluster.owner().post(
        "/api/v1/models", json={"name": "m", "paths": [str(tmp_path / "a.bin"), str(tmp_path)]}
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "paths[1]"
    missing = cluster.owner().post(
        "/api/v1/models", json={"name": "m", "paths": [str(tmp_path / "nope.bin")]}
    )
    assert missing.status_code == 400
    assert str(tmp_path) not in missing.text


def test_importing_models_needs_the_local_owner(cluster: RunningCluster, tmp_path: Path) -> None:
    _write(tmp_path / "a.bin", b"a")
    token = cluster.token("models:manage", "models:read")
    response = cluster.client(token).post(
        "/api/v1/models", json={"name": "m", "paths": [str(tmp_path / "a.bin")]}
    )
    assert response.status_code == 403


def test_an_unknown_model_is_not_found(cluster: RunningCluster) -> None:
    response = cluster.owner().get("/api/v1/models/mdl_aaaaaaaaaaaaaaaaaaaaaaaaaa")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_local_node_is_registered_with_its_capacity(cluster: RunningCluster) -> None:
    nodes = cluster.owner().get("/api/v1/nodes").json()["nodes"]
    assert len(nodes) == 1
    node = nodes[0]
    assert node["local"] is True
    assert node["capacity"]["cpu_count"] == len(os.sched_getaffinity(0))
    assert 0 < node["availability"]["memory_available_bytes"] <= node["capacity"]["memory_bytes"]
