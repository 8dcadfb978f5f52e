"""Helpers for federation tests: companions, pairings and grantable services on real clusters.

Everything goes through the real HTTP API of running `ficc serve` processes (or the real CLI);
the clusters talk to each other over real HyperNet (iroh) on loopback.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from tests.support.cluster import RunningCluster, added_environment, ficc, start_cluster

T = TypeVar("T")

API = "/api/v1/federation"
POLL_SECONDS = 0.05
DEFAULT_DEADLINE_SECONDS = 20.0
DISCOVER_GRANT: dict[str, Any] = {"scopes": ["discover"]}


def wait_for(
    condition: Callable[[], T | None], *, seconds: float = DEFAULT_DEADLINE_SECONDS, what: str
) -> T:
    """Poll ``condition`` until it returns something truthy, or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(POLL_SECONDS)


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, f"{response.status_code}: {response.text}"
    body: dict[str, Any] = response.json()
    return body


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The contract's error envelope of a refused request."""
    assert response.status_code == status, f"{response.status_code}: {response.text}"
    error: dict[str, Any] = response.json()["error"]
    return error


def overview(client: httpx.Client) -> dict[str, Any]:
    return ok(client.get(f"{API}/"))


def configure(cluster: RunningCluster, label: str) -> dict[str, Any]:
    """Start the cluster's companion with an agent directory beside its state directory."""
    agent = cluster.state_dir.parent / f"{cluster.state_dir.name}-agent"
    body = {"agent_directory": str(agent), "label": label}
    return ok(cluster.owner().put(f"{API}/configuration", json=body))


@contextlib.contextmanager
def configured_pair(
    root: Path, **environment: str
) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    """alpha and beta serving under ``root``, each with its companion configured, started with
    ``environment`` added to theirs; both stopped on the way out."""
    with added_environment(environment):
        alpha = start_cluster(root / "alpha")
        beta = start_cluster(root / "beta")
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        yield alpha, beta
    finally:
        alpha.stop()
        beta.stop()


def identity(cluster: RunningCluster) -> dict[str, Any]:
    found: dict[str, Any] = overview(cluster.owner())["identity"]
    return found


def send_offer(
    requester: httpx.Client, service: RunningCluster, scopes: list[str]
) -> dict[str, Any]:
    """POST /offers from ``requester`` to ``service``'s HyperNet ID (with its ticket)."""
    who = identity(service)
    body = {"service": who["hypernet_id"], "scopes": scopes, "ticket": who["ticket"]}
    return ok(requester.post(f"{API}/offers", json=body), 201)


def approve(
    client: httpx.Client, offer_id: str, grant: dict[str, Any], revision: int = 1
) -> httpx.Response:
    body = {"revision": revision, "grant": grant}
    return client.post(f"{API}/offers/{offer_id}/approve", json=body)


def finish(client: httpx.Client, offer_id: str, digest: str) -> httpx.Response:
    return client.post(f"{API}/offers/{offer_id}/finish", json={"receipt": digest})


def offer_in(view: dict[str, Any], offer_id: str) -> dict[str, Any] | None:
    return next((item for item in view["offers"] if item["id"] == offer_id), None)


def peer_in(view: dict[str, Any], peer_id: str) -> dict[str, Any] | None:
    return next((item for item in view["peers"] if item["id"] == peer_id), None)


def grant_in(view: dict[str, Any], grant_id: str) -> dict[str, Any] | None:
    return next((item for item in view["grants"] if item["id"] == grant_id), None)


def refresh(client: httpx.Client, peer_id: str, **body: Any) -> httpx.Response:
    return client.post(f"{API}/peers/{peer_id}/refresh", json=body)


@dataclass(frozen=True)
class Pairing:
    """A finished pairing: the offer, each side's peer ID, the first grant and generation."""

    offer: str
    requester_peer: str
    service_peer: str
    grant: str
    digest: str
    generation: int


def pair(
    requester: RunningCluster,
    service: RunningCluster,
    *,
    scopes: list[str] | None = None,
    grant: dict[str, Any] | None = None,
) -> Pairing:
    """Offer, approve and finish through the API of both clusters."""
    offer = send_offer(requester.owner(), service, scopes or ["discover"])
    approved = ok(approve(service.owner(), offer["id"], grant or DISCOVER_GRANT))
    digest = approved["receipt"]["digest"]
    finished = ok(finish(requester.owner(), offer["id"], digest))
    service_view = overview(service.owner())
    service_offer = offer_in(service_view, offer["id"])
    assert service_offer is not None
    assert service_offer["state"] == "finished"
    service_peer = peer_in(service_view, service_offer["peer"])
    assert service_peer is not None
    return Pairing(
        offer=offer["id"],
        requester_peer=finished["peer"]["id"],
        service_peer=service_peer["id"],
        grant=approved["receipt"]["grant"],
        digest=digest,
        generation=service_peer["generation"],
    )


def audit_entries(client: httpx.Client) -> list[dict[str, Any]]:
    """The whole audit log of the client's project, page by page."""
    entries: list[dict[str, Any]] = []
    after = 0
    while True:
        page = ok(client.get(f"{API}/audit", params={"after": after, "limit": 500}))["entries"]
        if not page:
            return entries
        entries += page
        after = page[-1]["seq"]


def add_service(
    cluster: RunningCluster, name: str, directory: Path, project: str = "default"
) -> str:
    """A stopped managed service in ``project``, over a catalogue-only model file.

    A service need not run to be granted, so the model file is a few bytes.
    """
    path = directory / f"{name}.gguf"
    path.write_bytes(b"GGUF" + name.encode() * 16)
    result = ficc(
        "model-add", "--name", name, "--project", project, str(path), state_dir=cluster.state_dir
    )
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)["id"]
    spec = {"name": name, "model": model, "runtime": "llama.cpp"}
    client = cluster.client(cluster.owner_token, **{"X-FICC-Project": project})
    service = ok(client.post("/api/v1/inference/services", json=spec), 201)
    return str(service["id"])
