"""Helpers for managed-inference tests: models, services, polling and engine processes.

Everything goes through the real HTTP API of a running `ficc serve` (or the real CLI); the
engine processes are inspected through /proc, as an operator would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from openai import OpenAI
from tests.support.cluster import RunningCluster, ficc

from ficc.adapters.runtimes.attempt_fence import processes_of_attempt

T = TypeVar("T")

SERVICES = "/api/v1/inference/services"
LOCAL_V1 = "/api/v1/inference/v1"
READY_DEADLINE_SECONDS = 60.0
POLL_SECONDS = 0.05


def wait_for(condition: Callable[[], T | None], *, seconds: float, what: str) -> T:
    """Poll ``condition`` until it returns something truthy, or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(POLL_SECONDS)


def add_model(cluster: RunningCluster, name: str, path: Path) -> str:
    """Import a model file with `ficc model-add`; its ID."""
    result = ficc("model-add", "--name", name, str(path), state_dir=cluster.state_dir)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["id"])


def spec(name: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "model": model, "runtime": "llama.cpp", **extra}


def create(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(SERVICES, json=body)
    assert response.status_code == 201, response.text
    service: dict[str, Any] = response.json()
    return service


def get(client: httpx.Client, service_id: str) -> dict[str, Any]:
    response = client.get(f"{SERVICES}/{service_id}")
    assert response.status_code == 200, response.text
    service: dict[str, Any] = response.json()
    return service


def control(
    client: httpx.Client,
    service_id: str,
    revision: int,
    operation: str,
    **extra: Any,
) -> httpx.Response:
    body = {"revision": revision, "operation": operation, **extra}
    return client.post(f"{SERVICES}/{service_id}/control", json=body)


def controlled(
    client: httpx.Client, service_id: str, revision: int, operation: str, **extra: Any
) -> dict[str, Any]:
    """A control operation that must be accepted; the service it returns."""
    response = control(client, service_id, revision, operation, **extra)
    assert response.status_code == 200, response.text
    service: dict[str, Any] = response.json()
    return service


def wait_for_state(
    client: httpx.Client, service_id: str, state: str, *, seconds: float = READY_DEADLINE_SECONDS
) -> dict[str, Any]:
    """Poll the service until it reaches ``state``; fail at once if it fails instead."""

    def reached() -> dict[str, Any] | None:
        service = get(client, service_id)
        if service["state"] == "failed" and state != "failed":
            raise AssertionError(f"service failed: {service['error']}: {service['replicas']}")
        return service if service["state"] == state else None

    return wait_for(reached, seconds=seconds, what=f"service {service_id} {state}")


def start_running(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Create and start a service, and wait until it runs."""
    service = create(client, body)
    controlled(client, service["id"], service["revision"], "start")
    return wait_for_state(client, service["id"], "running")


def stop(client: httpx.Client, service_id: str) -> dict[str, Any]:
    service = get(client, service_id)
    return controlled(client, service_id, service["revision"], "stop")


def openai_client(cluster: RunningCluster, token: str | None = None) -> OpenAI:
    """The official client on FICC's local compatible URL; never retries on its own. Its
    connections are the cluster's, closed when the cluster stops (an OpenAI client left to the
    garbage collector may drop an open socket, a ResourceWarning in whichever test runs then)."""
    return OpenAI(
        base_url=cluster.url + LOCAL_V1,
        api_key=token or cluster.owner_token,
        max_retries=0,
        timeout=60,
        http_client=cluster.client(),
    )


# --- engine processes, seen through /proc ------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks; None if there is no such process."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def is_running(pid: int, ticks: int | None = None) -> bool:
    """Whether ``pid`` (with start time ``ticks``, when given) runs and is not a zombie."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in {"Z", "X"}:
        return False
    return ticks is None or int(fields[19]) == ticks


def live_processes_of_attempt(attempt_id: str) -> list[int]:
    """Processes (not zombies) whose environment carries FICC_ATTEMPT=<attempt_id>, each the
    root of its tree: an engine's sandbox launcher (the pid FICC records), not the namespace
    init and the engine process below it."""
    live = [pid for pid in processes_of_attempt(attempt_id) if is_running(pid)]
    parents = {pid: _stat_fields(pid) for pid in live}
    return [
        pid
        for pid, fields in parents.items()
        if fields is not None and int(fields[1]) not in parents
    ]


def children_of(pid: int) -> list[int]:
    """Running processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid and fields[0] not in {"Z", "X"}:
                found.append(int(entry.name))
    return found


def engine_api_key(replica: dict[str, Any]) -> str:
    """The key a replica's engine answers to: FICC hands each attempt its own through the
    engine's environment, readable by the same user only."""
    environ = Path(f"/proc/{replica['pid']}/environ").read_bytes().split(b"\0")
    for entry in environ:
        name, _, value = entry.partition(b"=")
        if name in (b"API_KEY", b"VLLM_API_KEY"):
            return value.decode()
    raise AssertionError(f"the engine of replica {replica['pid']} has no API key")
