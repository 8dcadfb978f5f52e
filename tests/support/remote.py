"""Helpers for remote-operation tests: two paired clusters, grants to switch between, requests.

``alpha`` is the requester and ``beta`` the grantor. Both are real `ficc serve` processes
talking over real HyperNet (iroh) on loopback; every step goes through their HTTP API.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.federation import (
    API,
    configure,
    grant_in,
    ok,
    overview,
    pair,
    peer_in,
    refresh,
    wait_for,
)
from tests.support.inference import engine_api_key, spec, start_running

from ficc.base.times import format_time
from ficc.domain.mutations import arguments_sha256

ALL_REMOTE_SCOPES = [
    "discover",
    "inference:invoke",
    "inference:manage",
    "models:read",
    "models:transfer",
    "models:manage",
    "resources:read",
]
CHAT = "/v1/chat/completions"
LOCAL_V1 = "/api/v1/inference/v1"


def new_mutation_id() -> str:
    return secrets.token_hex(16)


@dataclass
class Federated:
    """Two paired clusters and what the grantor offers: a running service, a model, a node."""

    alpha: RunningCluster
    beta: RunningCluster
    peer: str
    """beta, as alpha's peer ID."""
    beta_peer: str
    """alpha, as beta's peer ID."""
    service: str
    model: str
    node: str
    engine_url: str
    """The running service's engine, called directly on beta's machine."""
    engine_key: str | None
    """The key that engine answers to (None: an upstream FICC does not launch)."""

    @property
    def alpha_owner(self) -> httpx.Client:
        return self.alpha.owner()

    def grant(self, **terms: Any) -> str:
        """A new grant from beta to alpha with ``terms``, selected on alpha; its ID."""
        given = ok(self.beta.owner().post(f"{API}/peers/{self.beta_peer}/grants", json=terms), 201)
        grant_id = str(given["id"])
        self.select(grant_id)
        return grant_id

    def select(self, grant_id: str) -> None:
        owner = self.alpha.owner()
        ok(refresh(owner, self.peer))
        ok(refresh(owner, self.peer, grant=grant_id))

    def request(
        self,
        operation: str,
        body: dict[str, Any] | None = None,
        mutation_id: str | None = None,
        *,
        timeout: float = 60,
    ) -> httpx.Response:
        """POST /peers/{beta}/request on alpha."""
        payload: dict[str, Any] = {"operation": operation, "body": body or {}}
        if mutation_id is not None:
            payload["mutation_id"] = mutation_id
        return self.alpha.owner().post(
            f"{API}/peers/{self.peer}/request", json=payload, timeout=timeout
        )

    def result(
        self, operation: str, body: dict[str, Any] | None = None, mutation_id: str | None = None
    ) -> Any:
        return ok(self.request(operation, body, mutation_id))["result"]

    def grantor_view(self, grant_id: str) -> dict[str, Any]:
        shown = grant_in(overview(self.beta.owner()), grant_id)
        assert shown is not None
        return shown

    def requester_view(self, grant_id: str) -> dict[str, Any]:
        """The grant as alpha sees it after a refresh."""
        ok(refresh(self.alpha.owner(), self.peer))
        peer = peer_in(overview(self.alpha.owner()), self.peer)
        assert peer is not None
        found = next(item for item in peer["remote_grants"] if item["id"] == grant_id)
        return dict(found)

    def wait_idle(self, grant_id: str, *, seconds: float = 10) -> None:
        """Until the grantor shows no request in flight under the grant."""
        wait_for(
            lambda: self.grantor_view(grant_id)["in_flight"] == 0,
            seconds=seconds,
            what=f"grant {grant_id} has nothing in flight",
        )

    def local_chat_seconds(self, **inner: Any) -> float:
        """A four-token chat on beta's own compatible URL: how long it took (it must finish).

        The engine serves one request at a time, so this is slow while it still generates
        for someone else.
        """
        body = {**invoke_body(self.service, **inner)["body"], "model": self.service}
        started = time.monotonic()
        answer = ok(self.beta.owner().post(f"{LOCAL_V1}/chat/completions", json=body))
        assert answer["choices"][0]["finish_reason"] in ("length", "stop")
        return time.monotonic() - started

    def federated_openai(self, token: str | None = None, **options: Any) -> OpenAI:
        """The official client on alpha's federated compatible URL; it never retries."""
        return OpenAI(
            base_url=self.federated_base_url,
            api_key=token or self.alpha.owner_token,
            max_retries=0,
            timeout=options.pop("timeout", 60),
            http_client=options.pop("http_client", None) or self.alpha.client(),
            **options,
        )

    @property
    def federated_base_url(self) -> str:
        return f"{self.alpha.url}{API}/peers/{self.peer}/v1"


@contextlib.contextmanager
def federation(
    root: Path, model_name: str, model_path: Path, **options: Any
) -> Iterator[Federated]:
    """alpha paired with beta; beta runs one service on ``model_path`` with ``options``.

    Both clusters (also a restarted beta) are stopped when the block ends.
    """
    alpha = start_cluster(root / "alpha")
    beta = start_cluster(root / "beta")
    fed: Federated | None = None
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        model = add_model(beta, model_name, model_path)
        body = spec(model_name, model, options=options)
        service = start_running(beta.owner(), body)
        fed = federate(alpha, beta, service, model)
        yield fed
    finally:
        alpha.stop()
        (beta if fed is None else fed.beta).stop()
        if fed is not None and fed.beta is not beta:
            beta.stop()


def restart(cluster: RunningCluster, hypernet: str) -> RunningCluster:
    """Start a stopped cluster's state directory again with its companion on ``hypernet``.

    Peers keep the ticket they were given, so the companion must come back on its old port.
    """
    return start_cluster(cluster.state_dir, "--hypernet-bind", hypernet)


def hypernet_address(cluster: RunningCluster) -> str:
    """The loopback IPv4 address and port the cluster's companion listens on."""
    addresses = overview(cluster.owner())["companion"]["addresses"]
    found = [a for a in addresses if a.startswith("127.0.0.1:")]
    assert found, f"no loopback IPv4 address among {addresses}"
    return str(found[0])


def add_model(cluster: RunningCluster, name: str, path: Path) -> str:
    done = ficc("model-add", "--name", name, str(path), state_dir=cluster.state_dir)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def local_node(cluster: RunningCluster) -> str:
    nodes = ok(cluster.owner().get("/api/v1/nodes"))
    listed = nodes["nodes"] if isinstance(nodes, dict) else nodes
    return str(listed[0]["id"])


def federate(
    alpha: RunningCluster, beta: RunningCluster, service: dict[str, Any], model: str
) -> Federated:
    """Pair alpha with beta (a discover grant); the running ``service`` is offered later."""
    pairing = pair(alpha, beta, scopes=ALL_REMOTE_SCOPES)
    (replica,) = service["replicas"]
    return Federated(
        alpha=alpha,
        beta=beta,
        peer=pairing.requester_peer,
        beta_peer=pairing.service_peer,
        service=str(service["id"]),
        model=model,
        node=local_node(beta),
        engine_url=f"http://127.0.0.1:{replica['port']}",
        engine_key=engine_api_key(replica) if replica.get("pid") else None,
    )


def invoke_body(service: str, **inner: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    return {"service": service, "path": CHAT, "body": {**defaults, **inner}}


def sse_events(text: str) -> list[Any]:
    """The JSON payloads of an event stream (``[DONE]`` kept as the string)."""
    events: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def error_events(events: list[Any]) -> list[dict[str, Any]]:
    return [event["error"] for event in events if isinstance(event, dict) and "error" in event]


def insert_uncertain_receipt(
    state_dir: Path, grant_id: str, mutation_id: str, operation: str, arguments: Any
) -> None:
    """Simulate a crash between the uncertain receipt and the effect: write only the receipt.

    The grantor must be stopped; this is the row it commits before any effect.
    """
    with sqlite3.connect(state_dir / "ficc.db") as connection:
        connection.execute(
            "INSERT INTO mutation_receipts (scope, mutation_id, operation, arguments_sha256,"
            " state, result, created_at, completed_at) VALUES (?, ?, ?, ?, ?, NULL, ?, NULL)",
            (
                f"grant:{grant_id}",
                mutation_id,
                operation,
                arguments_sha256(operation, arguments),
                "uncertain",
                format_time(datetime.now(UTC)),
            ),
        )


def elapsed(started: float) -> float:
    return time.monotonic() - started
