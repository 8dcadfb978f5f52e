"""Helpers for acquisition tests: generated model files, transfer grants, polling a transfer.

Everything goes through the real HTTP API or the real CLI of running `ficc serve` processes,
which talk to each other over real HyperNet (iroh) on loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tests.support.cluster import RunningCluster, added_environment, ficc, start_cluster
from tests.support.federation import API, Pairing, ok, overview, pair, refresh, wait_for

MiB = 1024 * 1024
TRANSFER_SCOPES = ["models:read", "models:transfer"]
FINISHED = ("complete", "failed", "paused")
PARTIAL_POLL_SECONDS = 0.002


def write_random_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes to ``path`` (in 4 MiB pieces); return their SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb") as out:
        left = size
        while left:
            piece = os.urandom(min(4 * MiB, left))
            digest.update(piece)
            out.write(piece)
            left -= len(piece)
    return digest.hexdigest()


def add_model(cluster: RunningCluster, name: str, files: list[Path]) -> dict[str, Any]:
    """Import ``files`` as one model with the real `ficc model-add`."""
    result = ficc("model-add", "--name", name, *map(str, files), state_dir=cluster.state_dir)
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = json.loads(result.stdout)
    return model


def generated_model(
    cluster: RunningCluster, directory: Path, name: str, sizes: list[int]
) -> dict[str, Any]:
    """A model of random files of ``sizes`` bytes, imported into ``cluster``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, size in enumerate(sizes):
        path = directory / f"{name}-{index}.bin"
        write_random_file(path, size)
        paths.append(path)
    return add_model(cluster, name, paths)


def transfer_grant(models: list[str], transfer_bytes: int, **extra: Any) -> dict[str, Any]:
    grant: dict[str, Any] = {
        "scopes": TRANSFER_SCOPES,
        "models": models,
        "transfer_bytes": transfer_bytes,
        "requests": 100_000,
    }
    grant.update(extra)
    return grant


def pair_for_transfer(
    requester: RunningCluster, grantor: RunningCluster, models: list[str], transfer_bytes: int
) -> Pairing:
    """Pair ``requester`` with ``grantor``, which grants exactly ``models`` and the allowance."""
    return pair(
        requester,
        grantor,
        scopes=TRANSFER_SCOPES,
        grant=transfer_grant(models, transfer_bytes),
    )


def new_transfer_grant(
    clusters: Clusters, pairing: Pairing, models: list[str], transfer_bytes: int
) -> str:
    """A further grant from beta to alpha for ``models``, selected by alpha; its ID."""
    body = transfer_grant(models, transfer_bytes)
    grant = ok(
        clusters.beta.owner().post(f"{API}/peers/{pairing.service_peer}/grants", json=body), 201
    )
    ok(refresh(clusters.alpha.owner(), pairing.requester_peer))  # learn of the new grant
    selected = ok(refresh(clusters.alpha.owner(), pairing.requester_peer, grant=grant["id"]))
    assert selected["selected"] == grant["id"], selected
    return str(grant["id"])


def acquire(client: httpx.Client, peer: str, model: str) -> httpx.Response:
    return client.post(f"{API}/peers/{peer}/models", json={"model": model})


def show(client: httpx.Client, transfer_id: str) -> dict[str, Any]:
    return ok(client.get(f"{API}/transfers/{transfer_id}"))


def pause(client: httpx.Client, transfer_id: str) -> httpx.Response:
    return client.post(f"{API}/transfers/{transfer_id}/pause")


def wait_until(
    client: httpx.Client,
    transfer_id: str,
    states: tuple[str, ...] = FINISHED,
    *,
    seconds: float = 60.0,
    what: str = "",
) -> dict[str, Any]:
    """Poll the transfer until its state is one of ``states``."""

    def reached() -> dict[str, Any] | None:
        current = show(client, transfer_id)
        return current if current["state"] in states else None

    return wait_for(reached, seconds=seconds, what=what or f"transfer {transfer_id} in {states}")


def wait_for_bytes(
    client: httpx.Client, transfer_id: str, at_least: int, *, seconds: float = 60.0
) -> dict[str, Any]:
    """Poll until ``bytes_done`` reaches ``at_least`` (the transfer may have gone further)."""

    def reached() -> dict[str, Any] | None:
        current = show(client, transfer_id)
        if current["state"] in ("failed", "paused"):
            raise AssertionError(f"the transfer stopped early: {current}")
        return current if current["bytes_done"] >= at_least else None

    return wait_for(reached, seconds=seconds, what=f"{at_least} bytes of {transfer_id}")


def grant_view(grantor: RunningCluster, grant_id: str) -> dict[str, Any]:
    """The grantor's own view of a grant it gave (``remaining``, ``in_flight``)."""
    view = overview(grantor.owner())
    found = next(item for item in view["grants"] if item["id"] == grant_id)
    return dict(found)


def transfer_bytes_served(grantor: RunningCluster, grant_id: str) -> int:
    """Range bytes charged to the grant so far (reserved bytes refunded when unsent)."""
    grant = grant_view(grantor, grant_id)
    return int(grant["transfer_bytes"]) - int(grant["remaining"]["transfer_bytes"])


def models_of(cluster: RunningCluster) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ok(cluster.owner().get("/api/v1/models"))["models"]
    return found


def local_model(cluster: RunningCluster, model_id: str) -> dict[str, Any]:
    return ok(cluster.owner().get(f"/api/v1/models/{model_id}"))


def partial_file(cluster: RunningCluster, transfer_id: str, index: int) -> Path:
    """Where the cluster keeps the bytes of file ``index`` of a transfer in progress."""
    return cluster.state_dir / "store" / "partial" / f"{transfer_id}.{index}"


def wait_for_partial(
    cluster: RunningCluster, transfer_id: str, at_least: int, *, seconds: float = 60.0
) -> int:
    """Poll the first file's partial bytes on disk (cheap, so the poll is tight)."""
    path = partial_file(cluster, transfer_id, 0)
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(FileNotFoundError):
            size = path.stat().st_size
            if size >= at_least:
                return size
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {at_least} bytes in {path}")
        time.sleep(PARTIAL_POLL_SECONDS)


def blob_path(cluster: RunningCluster, sha256: str) -> Path:
    return cluster.state_dir / "store" / "blobs" / sha256[:2] / sha256


@contextlib.contextmanager
def frozen(cluster: RunningCluster) -> Iterator[None]:
    """A simulated network freeze: the cluster's process is stopped (SIGSTOP) until the end."""
    cluster.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        cluster.process.send_signal(signal.SIGCONT)


def start_tuned(
    state_dir: Path, *extra_args: str, range_bytes: int, stall_seconds: float
) -> RunningCluster:
    """`ficc serve` with small transfer ranges and a short stall deadline (both documented)."""
    tuning = {
        "FICC_TRANSFER_RANGE_BYTES": str(range_bytes),
        "FICC_TRANSFER_STALL_SECONDS": str(stall_seconds),
    }
    with added_environment(tuning):
        return start_cluster(state_dir, *extra_args)


def hypernet_address(cluster: RunningCluster) -> str:
    """The loopback address the cluster's companion is bound to (``127.0.0.1:PORT``)."""
    addresses = overview(cluster.owner())["companion"]["addresses"]
    return next(str(a) for a in addresses if str(a).startswith("127.0.0.1:"))


@dataclass
class Clusters:
    """The requester (alpha) and the grantor (beta); either may be restarted by a test."""

    alpha: RunningCluster
    beta: RunningCluster
    range_bytes: int
    stall_seconds: float

    def restart_alpha(self) -> RunningCluster:
        self.alpha = start_tuned(
            self.alpha.state_dir, range_bytes=self.range_bytes, stall_seconds=self.stall_seconds
        )
        return self.alpha

    def restart_beta(self, hypernet_bind: str) -> RunningCluster:
        """Restart the grantor on the HyperNet address it had: peers know it by that address."""
        self.beta = start_tuned(
            self.beta.state_dir,
            "--hypernet-bind",
            hypernet_bind,
            range_bytes=self.range_bytes,
            stall_seconds=self.stall_seconds,
        )
        return self.beta
