"""A Ray node at another address (127.0.0.2) with its own blob store: FICC's "remote" machine.

In the loopback-only network namespace every 127.0.0.0/8 address reaches lo, so a worker node
started with ``node_ip_address=127.0.0.2`` is, to FICC, a node on another machine. The tests run
in order on one Ray cluster and one FICC: a service placed there fetches the model's blob into
the node's store (verified), its engine listens on 127.0.0.2 only and answers through the local
OpenAI URL; then a tampered fetch is refused and nothing is launched; put right, it starts again.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.inference import (
    controlled,
    create,
    engine_api_key,
    get,
    live_processes_of_attempt,
    openai_client,
    wait_for,
    wait_for_state,
)
from tests.support.ray import RayCluster, RemoteNode, command_line, ray_cluster
from tests.support.remote import add_model
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.adapters.ray_nodes import ficc_node_id

REMOTE = "remote"
REMOTE_ADDRESS = "127.0.0.2"


@dataclass
class Setting:
    """The Ray cluster, FICC on it, the model, its blob in FICC's store and the node's store."""

    ray: RayCluster
    ficc: RunningCluster
    model: str
    digest: str
    ficc_blob: Path
    node_store: Path
    service: str = ""


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    root = tmp_path_factory.mktemp("ray-remote")
    model_file = write_tiny_gguf(root / "tiny.gguf")
    digest = hashlib.sha256(model_file.read_bytes()).hexdigest()
    node_store = root / "node-store"
    with ray_cluster(remote={REMOTE: RemoteNode(REMOTE_ADDRESS, node_store)}) as ray:
        ficc = start_cluster(root / "ficc", "--ray", ray.address)
        try:
            model = add_model(ficc, "tiny", model_file)
            ficc_blob = ficc.state_dir / "store" / "blobs" / digest[:2] / digest
            yield Setting(ray, ficc, model, digest, ficc_blob, node_store)
        finally:
            ficc.stop()


def node_blob(setting: Setting) -> Path:
    return setting.node_store / "blobs" / setting.digest[:2] / setting.digest


def leftovers(setting: Setting) -> list[Path]:
    """Temp or partial files in the node's store: a fetch must leave none, done or refused."""
    return [
        path
        for folder in ("tmp", "partial")
        if (setting.node_store / folder).is_dir()
        for path in (setting.node_store / folder).iterdir()
    ]


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def healthy_replica(service: dict[str, Any]) -> dict[str, Any]:
    (replica,) = [replica for replica in service["replicas"] if replica["state"] == "healthy"]
    return replica


def actor_processes() -> list[int]:
    """Ray workers running a replica's actor (their process title names the actor class)."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _title(entry).startswith("ray::EngineHost")
    ]


def _title(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def chat(setting: Setting) -> str:
    answer = openai_client(setting.ficc).chat.completions.create(
        model=setting.service,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        temperature=0,
    )
    assert answer.choices[0].finish_reason in ("length", "stop")
    return str(answer.model)


def test_a_service_on_a_remote_node_fetches_its_blob_and_listens_on_the_node(
    setting: Setting,
) -> None:
    owner = setting.ficc.owner()
    node_id = ficc_node_id(setting.ray.ray_node_id(REMOTE))
    assert not node_blob(setting).exists()
    service = create(
        owner, {"name": "tiny", "model": setting.model, "runtime": "llama.cpp", "node": node_id}
    )
    setting.service = service["id"]
    controlled(owner, service["id"], service["revision"], "start")
    replica = healthy_replica(wait_for_state(owner, service["id"], "running"))
    # The blob reached the node's own store, whole and verified, and nothing half-written stayed.
    assert hashlib.sha256(node_blob(setting).read_bytes()).hexdigest() == setting.digest
    assert leftovers(setting) == []
    # The engine loads the node's copy and listens on the node's address, not on loopback.
    argv = command_line(int(replica["pid"])).split()
    assert flag_value(argv, "--model") == str(node_blob(setting))
    assert flag_value(argv, "--host") == REMOTE_ADDRESS
    port = int(flag_value(argv, "--port"))
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass
    # The hop is guarded by the attempt's key, which is in the engine's environment only.
    api_key = engine_api_key(replica)
    assert api_key not in command_line(int(replica["pid"]))
    engine = f"http://{REMOTE_ADDRESS}:{port}/v1/models"
    assert httpx.get(engine, timeout=10).status_code == 401
    headers = {"Authorization": f"Bearer {api_key}"}
    assert httpx.get(engine, headers=headers, timeout=10).status_code == 200
    assert chat(setting) == setting.service
    # Its log is in the node's store: the node has no FICC state directory of its own.
    assert (setting.node_store / "logs" / service["id"] / f"{replica['attempt']}.log").is_file()


def test_a_tampered_fetch_is_refused_and_nothing_is_launched(setting: Setting) -> None:
    owner = setting.ficc.owner()
    running = get(owner, setting.service)
    controlled(owner, setting.service, running["revision"], "stop")
    stopped = wait_for_state(owner, setting.service, "stopped")
    node_blob(setting).unlink()
    original = setting.ficc_blob.read_bytes()
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0xFF
    setting.ficc_blob.chmod(0o644)
    setting.ficc_blob.write_bytes(bytes(tampered))
    try:
        controlled(owner, setting.service, stopped["revision"], "start")
        failed = wait_for_state(owner, setting.service, "failed")
    finally:
        setting.ficc_blob.write_bytes(original)
        setting.ficc_blob.chmod(0o444)
    assert "SHA-256" in failed["error"], failed["error"]
    assert setting.digest in failed["error"], failed["error"]
    # Refused before launch: no engine for any attempt, no blob and no temp file on the node.
    attempts = [replica["attempt"] for replica in failed["replicas"]]
    assert [pid for attempt in attempts for pid in live_processes_of_attempt(attempt)] == []
    assert not node_blob(setting).exists()
    assert leftovers(setting) == []
    wait_for(lambda: actor_processes() == [], seconds=10, what="the refused replica's actor gone")
    # Put right, the same service fetches again and answers.
    controlled(owner, setting.service, failed["revision"], "start")
    wait_for_state(owner, setting.service, "running")
    assert hashlib.sha256(node_blob(setting).read_bytes()).hexdigest() == setting.digest
    assert chat(setting) == setting.service
