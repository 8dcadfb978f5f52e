"""Two `ficc serve` processes on one PostgreSQL database, one state directory and one real Ray
cluster: kill -9 of the active, and the standby takes over adopting the running replica (its
detached actor and engine), not starting a second engine; a federated and a local chat then
answer through the adopted replica (the figure printed). The old active, started again, stands
by; the new active paused (SIGSTOP) past its lease is taken over the same way and, woken, ends
without touching the replica it no longer owns.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_standby_on_postgresql import (
    LEASE_SECONDS,
    TAKEOVER_DEADLINE_SECONDS,
    readiness,
    wait_active,
)
from tests.e2e.test_standby_on_postgresql import (
    chat as federated_chat,
)
from tests.support.cluster import RunningCluster, added_environment, start_cluster, start_standby
from tests.support.federation import configure
from tests.support.inference import (
    controlled,
    create,
    is_running,
    live_processes_of_attempt,
    openai_client,
    wait_for,
    wait_for_state,
)
from tests.support.postgres import PostgresServer
from tests.support.ray import RayCluster, parent_of, ray_cluster
from tests.support.remote import Federated, add_model, federate
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.adapters.ray_nodes import ficc_node_id
from ficc.bootstrap import CONNECT_SECONDS_VARIABLE
from ficc.bootstrap.settings import LEASE_SECONDS_VARIABLE

WORKER = "worker"


@dataclass
class Pair:
    """The Ray cluster, beta's two processes on it, and alpha, the peer that calls beta."""

    ray: RayCluster
    active: RunningCluster
    standby: RunningCluster
    alpha: RunningCluster
    arguments: tuple[str, ...]
    stopped_at_end: list[RunningCluster]


@pytest.fixture
def pair(tmp_path: Path, postgres: PostgresServer) -> Iterator[Pair]:
    with ray_cluster(WORKER) as ray:
        arguments = ("--database", postgres.database("standby_ray"), "--ray", ray.address)
        with added_environment({LEASE_SECONDS_VARIABLE: str(LEASE_SECONDS)}):
            active = start_cluster(tmp_path / "beta", *arguments)
            standby = start_standby(tmp_path / "beta", *arguments)
        with added_environment({CONNECT_SECONDS_VARIABLE: "2"}):
            alpha = start_cluster(tmp_path / "alpha")
        started = Pair(ray, active, standby, alpha, arguments, [alpha, active, standby])
        try:
            yield started
        finally:
            for cluster in started.stopped_at_end:
                cluster.stop()


def replica(service: dict[str, Any]) -> tuple[str, int]:
    """The attempt and engine pid of the service's one healthy replica."""
    (healthy,) = [r for r in service["replicas"] if r["state"] == "healthy"]
    return str(healthy["attempt"]), int(healthy["pid"])


def chat(client: Any, model: str) -> bool:
    try:
        answer = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
    except Exception:  # noqa: BLE001 - not answering yet, whatever the client says
        return False
    return answer.model == model


def assert_adopted(cluster: RunningCluster, service_id: str, attempt: str, pid: int) -> None:
    """Running on the very engine the first process launched, and on no other."""
    service = wait_for_state(cluster.owner(), service_id, "running")
    assert replica(service) == (attempt, pid)
    engines = [p for r in service["replicas"] for p in live_processes_of_attempt(r["attempt"])]
    assert engines == [pid]
    assert chat(openai_client(cluster), service_id)


def test_the_standby_takes_over_a_ray_cluster_adopting_its_replicas(
    pair: Pair, tmp_path: Path
) -> None:
    owner = pair.active.owner()
    worker = ficc_node_id(pair.ray.ray_node_id(WORKER))
    model = add_model(pair.active, "tiny", write_tiny_gguf(tmp_path / "tiny.gguf"))
    spec = {"name": "tiny", "model": model, "runtime": "llama.cpp", "node": worker}
    created = create(owner, spec)
    controlled(owner, created["id"], created["revision"], "start")
    service_id = str(created["id"])
    running = wait_for_state(owner, service_id, "running")
    attempt, pid = replica(running)
    actor_pid = parent_of(pid)
    configure(pair.alpha, "alpha")
    configure(pair.active, "beta")
    fed: Federated = federate(pair.alpha, pair.active, running, model)
    fed.grant(scopes=["inference:invoke"], services=[service_id])
    assert federated_chat(fed).status_code == 200

    pair.active.process.send_signal(signal.SIGKILL)
    pair.active.process.wait()
    killed_at = time.monotonic()
    while True:
        answer = federated_chat(fed)
        took = time.monotonic() - killed_at
        if answer.status_code == 200 or took > TAKEOVER_DEADLINE_SECONDS + 30:
            break
        time.sleep(0.2)
    print(f"\nkill -9 of the active to a federated chat through the adopted replica: {took:.1f} s")
    assert answer.status_code == 200, pair.standby.log_path.read_text()
    assert took < TAKEOVER_DEADLINE_SECONDS
    assert readiness(pair.standby)[1]["role"] == "active"
    assert parent_of(pid) == actor_pid
    assert_adopted(pair.standby, service_id, attempt, pid)

    with added_environment({LEASE_SECONDS_VARIABLE: str(LEASE_SECONDS)}):
        restarted = start_standby(pair.active.state_dir, *pair.arguments, log_name="again")
    pair.stopped_at_end.append(restarted)
    assert readiness(restarted)[1]["role"] == "standby"
    # The active paused past its lease: the other takes over and adopts the replica; woken,
    # the paused one records nothing, leaves the replica to its owner and stops.
    pair.standby.process.send_signal(signal.SIGSTOP)
    wait_active(restarted)
    assert_adopted(restarted, service_id, attempt, pid)
    pair.standby.process.send_signal(signal.SIGCONT)
    assert pair.standby.process.wait(timeout=60) == 1
    assert "lost the active lease" in pair.standby.log_path.read_text()
    assert is_running(pid)
    assert_adopted(restarted, service_id, attempt, pid)
    # It held the HyperNet port peers know while paused; once it ended, the new active moved
    # there, and the peer reaches it again by itself.
    wait_for(
        lambda: federated_chat(fed).status_code == 200,
        seconds=TAKEOVER_DEADLINE_SECONDS,
        what="a federated chat once the paused process gave the HyperNet port back",
    )
