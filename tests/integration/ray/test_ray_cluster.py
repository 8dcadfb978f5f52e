"""FICC on a real local Ray cluster (a head and one worker node): `ficc serve --ray ADDRESS`.

The tests run in order on one Ray cluster and one FICC cluster ``beta`` (restarted once):
nodes listed from Ray; a service on the worker node answering on the local and the federated
URLs; ``kill -9`` of its actor; FICC killed and restarted, adopting the live replica; the node
removed (the adopted replica is supervised as FICC's own). ray is a test
dependency: a missing ray fails at import, it never skips.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import configure
from tests.support.inference import (
    controlled,
    create,
    get,
    is_running,
    live_processes_of_attempt,
    openai_client,
    wait_for,
    wait_for_state,
)
from tests.support.ray import RayCluster, command_line, parent_of, ray_cluster
from tests.support.remote import Federated, add_model, federate
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.adapters.ray_nodes import ficc_node_id

NODES = "/api/v1/nodes"
WORKER = "worker"
NODE_DEADLINE_SECONDS = 30.0


@dataclass
class Setting:
    """The Ray cluster, FICC on it (``beta``), a plain FICC (``alpha``) and the model."""

    ray: RayCluster
    beta: RunningCluster
    alpha: RunningCluster
    model: str
    service: str = ""
    fed: Federated | None = None


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    root = tmp_path_factory.mktemp("ray")
    model_file = write_tiny_gguf(root / "tiny.gguf")
    with ray_cluster(WORKER) as ray:
        beta = start_cluster(root / "beta", "--ray", ray.address)
        alpha = start_cluster(root / "alpha")
        state = Setting(ray, beta, alpha, add_model(beta, "tiny", model_file))
        try:
            yield state
        finally:
            alpha.stop()
            state.beta.stop()


def nodes_of(cluster: RunningCluster) -> list[dict[str, Any]]:
    response = cluster.owner().get(NODES)
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["nodes"]
    return listed


def node_of(setting: Setting, role: str) -> dict[str, Any]:
    wanted = ficc_node_id(setting.ray.ray_node_id(role))
    (node,) = [node for node in nodes_of(setting.beta) if node["id"] == wanted]
    return node


def replica_pid(service: dict[str, Any]) -> int:
    """The engine pid of the service's one healthy replica (earlier attempts are listed too)."""
    (replica,) = [replica for replica in service["replicas"] if replica["state"] == "healthy"]
    return int(replica["pid"])


def chat(client: Any, model: str) -> str:
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0
    )
    assert answer.choices[0].finish_reason in ("length", "stop")
    return str(answer.model)


def test_the_nodes_are_the_alive_ray_nodes(setting: Setting) -> None:
    listed = nodes_of(setting.beta)
    assert len(listed) == 2
    worker = node_of(setting, WORKER)
    assert worker["ray_node_id"] == setting.ray.ray_node_id(WORKER)
    assert worker["labels"]["ficc-test-role"] == WORKER
    assert worker["local"] is False
    assert worker["capacity"]["cpu_count"] == 1
    assert worker["availability"]["available"] is True
    (head,) = [node for node in listed if node is not None and node["id"] != worker["id"]]
    assert head["local"] is True
    assert head["availability"]["available"] is True


def test_a_service_on_the_worker_node_answers_locally_and_to_a_peer(setting: Setting) -> None:
    owner = setting.beta.owner()
    worker = node_of(setting, WORKER)
    service = create(
        owner,
        {
            "name": "tiny",
            "model": setting.model,
            "runtime": "llama.cpp",
            "node": worker["id"],
            "restart": "never",  # a crash is shown failed, for the tests below to see
        },
    )
    controlled(owner, service["id"], service["revision"], "start")
    running = wait_for_state(owner, service["id"], "running")
    setting.service = service["id"]
    pid = replica_pid(running)
    # The engine is the child of its Ray actor's worker process, not of FICC.
    actor_pid = parent_of(pid)
    assert actor_pid != setting.beta.process.pid
    assert "EngineHost" in command_line(actor_pid)
    assert chat(openai_client(setting.beta), service["id"]) == service["id"]
    configure(setting.alpha, "alpha")
    configure(setting.beta, "beta")
    setting.fed = federate(setting.alpha, setting.beta, running, setting.model)
    setting.fed.grant(scopes=["inference:invoke"], services=[service["id"]])
    assert chat(setting.fed.federated_openai(), service["id"]) == service["id"]


def test_kill_9_of_the_actor_fails_the_replica_and_a_start_restarts_it(setting: Setting) -> None:
    owner = setting.beta.owner()
    pid = replica_pid(get(owner, setting.service))
    actor_pid = parent_of(pid)
    os.kill(actor_pid, signal.SIGKILL)
    failed = wait_for_state(owner, setting.service, "failed")
    assert "Ray actor died" in failed["error"], failed["error"]
    # The engine died with its actor: nothing holds the node's CPU or the port.
    wait_for(lambda: not is_running(pid), seconds=10, what="the engine ended with its actor")
    controlled(owner, setting.service, failed["revision"], "start")
    running = wait_for_state(owner, setting.service, "running")
    assert replica_pid(running) != pid
    assert chat(openai_client(setting.beta), setting.service) == setting.service


def test_a_restarted_ficc_adopts_its_live_replica_and_runs_no_second_engine(
    setting: Setting,
) -> None:
    owner = setting.beta.owner()
    before = get(owner, setting.service)
    pid = replica_pid(before)
    actor_pid = parent_of(pid)
    setting.beta.stop(signal.SIGKILL)
    # The detached actor and its engine outlive FICC's driver...
    assert is_running(pid)
    assert is_running(actor_pid)
    setting.beta = start_cluster(setting.beta.state_dir, "--ray", setting.ray.address)
    owner = setting.beta.owner()
    # ...and the restarted FICC found the actor by its attempt, holding the recorded engine
    # that answers the attempt's key: adopted, running at once, on the very same engine.
    adopted = get(owner, setting.service)
    assert (adopted["state"], adopted["desired"]) == ("running", "running")
    assert replica_pid(adopted) == pid
    assert parent_of(pid) == actor_pid
    # One engine among every attempt the service ever had: no second one was started.
    engines = [
        pid
        for replica in adopted["replicas"]
        for pid in live_processes_of_attempt(replica["attempt"])
    ]
    assert engines == [pid]
    assert chat(openai_client(setting.beta), setting.service) == setting.service
    assert setting.fed is not None
    fed = setting.fed
    wait_for(
        lambda: federated_chat(fed, setting.service),
        seconds=NODE_DEADLINE_SECONDS,
        what="a federated chat through the adopted replica",
    )


def federated_chat(fed: Federated, service_id: str) -> bool:
    """Whether a chat through the peer's federated URL answers (it reconnects by itself)."""
    try:
        return chat(fed.federated_openai(), service_id) == service_id
    except Exception:  # noqa: BLE001 - not answering yet, whatever the client says
        return False


def test_a_node_that_leaves_fails_its_replica_and_is_shown_unavailable(setting: Setting) -> None:
    owner = setting.beta.owner()
    pid = replica_pid(get(owner, setting.service))
    node_id = node_of(setting, WORKER)["id"]
    setting.ray.remove(WORKER)
    failed = wait_for_state(owner, setting.service, "failed", seconds=NODE_DEADLINE_SECONDS)
    assert node_id in failed["error"] or "Ray actor died" in failed["error"], failed["error"]
    wait_for(lambda: not is_running(pid), seconds=10, what="the engine ended with its node")

    def unavailable() -> dict[str, Any] | None:
        node = next(n for n in nodes_of(setting.beta) if n["id"] == node_id)
        return node if node["availability"]["available"] is False else None

    node = wait_for(unavailable, seconds=NODE_DEADLINE_SECONDS, what="the node unavailable")
    assert node["availability"]["reason"] == "the node left the Ray cluster"
    before = get(owner, setting.service)
    refused = owner.post(
        f"/api/v1/inference/services/{setting.service}/control",
        json={"revision": before["revision"], "operation": "start"},
    )
    assert refused.status_code == 409, refused.text
    assert "left the Ray cluster" in refused.json()["error"]["message"]
    after = get(owner, setting.service)
    assert (after["state"], after["revision"]) == ("failed", before["revision"])
