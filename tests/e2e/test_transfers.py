"""Acquiring a peer's model between two real clusters over real HyperNet on loopback.

alpha acquires; beta grants. Both run with 8 MiB ranges (``FICC_TRANSFER_RANGE_BYTES``), so a
model of a few tens of MiB already spans several ranges, and a 5 s stall deadline
(``FICC_TRANSFER_STALL_SECONDS``), so a silent peer is noticed quickly. Faults are real: a
process killed with SIGKILL, a byte flipped in a stored blob, and — named as a simulation — a
peer frozen with SIGSTOP to stand for a network that stops delivering.

Each test selects its own grant of the one pairing, so the bytes a grant was charged are the
bytes the grantor served for that test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cli import with_default_ctrl_c
from tests.support.cluster import RunningCluster, ficc
from tests.support.federation import (
    API,
    Pairing,
    configure,
    error_of,
    ok,
    overview,
    refresh,
    wait_for,
)
from tests.support.transfers import (
    Clusters,
    MiB,
    acquire,
    blob_path,
    frozen,
    generated_model,
    grant_view,
    hypernet_address,
    local_model,
    models_of,
    new_transfer_grant,
    pair_for_transfer,
    partial_file,
    pause,
    show,
    start_tuned,
    transfer_bytes_served,
    wait_for_bytes,
    wait_for_partial,
    wait_until,
)

RANGE = 8 * MiB
STALL_SECONDS = 5.0
BIG = [6 * RANGE]
"""Six ranges: long enough to catch mid-transfer, small enough to generate quickly."""
ALLOWANCE = 1024 * MiB


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    root = tmp_path_factory.mktemp("transfers")
    alpha = start_tuned(root / "alpha", range_bytes=RANGE, stall_seconds=STALL_SECONDS)
    beta = start_tuned(root / "beta", range_bytes=RANGE, stall_seconds=STALL_SECONDS)
    both = Clusters(alpha, beta, RANGE, STALL_SECONDS)
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        yield both
    finally:
        both.alpha.stop()
        both.beta.stop()


@pytest.fixture(scope="module")
def pairing(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Pairing:
    """One pairing for the module; its first grant covers a small placeholder model."""
    first = generated_model(clusters.beta, tmp_path_factory.mktemp("first"), "first", [MiB])
    return pair_for_transfer(clusters.alpha, clusters.beta, [first["id"]], ALLOWANCE)


def granted_model(
    clusters: Clusters,
    pairing: Pairing,
    directory: Path,
    name: str,
    sizes: list[int],
    *,
    transfer_bytes: int = ALLOWANCE,
) -> tuple[dict[str, Any], str]:
    """A fresh model on beta and a fresh grant for it, selected by alpha."""
    model = generated_model(clusters.beta, directory, name, sizes)
    grant = new_transfer_grant(clusters, pairing, [model["id"]], transfer_bytes)
    return model, grant


def start_mid_transfer(
    clusters: Clusters, pairing: Pairing, model: dict[str, Any]
) -> dict[str, Any]:
    """Start acquiring ``model`` and return once a range of it is written on alpha's disk."""
    started = ok(acquire(clusters.alpha.owner(), pairing.requester_peer, model["id"]), 202)
    assert started["state"] == "running"
    wait_for_partial(clusters.alpha, started["id"], RANGE + 1)
    return started


def assert_registered(alpha: RunningCluster, transfer: dict[str, Any], model: dict[str, Any]):
    assert transfer["state"] == "complete", transfer
    assert transfer["bytes_done"] == transfer["bytes_total"]
    registered = local_model(alpha, transfer["local_model"])
    assert registered["sha256"] == model["sha256"]
    assert registered["manifest"] == model["manifest"]
    return registered


def test_a_multi_file_model_is_acquired_verified_and_registered_with_its_provenance(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    sizes = [3 * RANGE - 12345, 5 * MiB + 7]
    model, grant = granted_model(clusters, pairing, tmp_path, "multi", sizes)
    started = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
    assert started["bytes_total"] == sum(sizes)
    assert started["sha256"] == model["sha256"]
    done = wait_until(alpha.owner(), started["id"], what="the multi-file model acquired")
    registered = assert_registered(alpha, done, model)
    assert done["error"] is None
    assert [(f["bytes_done"], f["verified"]) for f in done["files"]] == [(s, True) for s in sizes]
    assert registered["provenance"]["peer"] == pairing.requester_peer
    assert registered["provenance"]["remote_model"] == model["id"]
    assert registered["provenance"]["grant"] == grant == done["grant"]
    for entry in model["manifest"]["files"]:
        assert blob_path(alpha, entry["sha256"]).read_bytes() == (
            blob_path(beta, entry["sha256"]).read_bytes()
        )
    assert not partial_file(alpha, started["id"], 0).exists()
    assert transfer_bytes_served(beta, grant) == sum(sizes)


def test_acquiring_a_completed_model_again_answers_the_completed_transfer(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    model, grant = granted_model(clusters, pairing, tmp_path, "twice", [RANGE + 3])
    started = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
    done = wait_until(alpha.owner(), started["id"])
    assert_registered(alpha, done, model)
    before = len(models_of(alpha))
    again = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
    assert (again["id"], again["state"], again["local_model"]) == (
        started["id"],
        "complete",
        done["local_model"],
    )
    assert len(models_of(alpha)) == before
    assert transfer_bytes_served(beta, grant) == RANGE + 3


def test_a_paused_transfer_keeps_its_bytes_and_resumes_without_going_back_more_than_a_range(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    model, grant = granted_model(clusters, pairing, tmp_path, "pausable", BIG)
    total = sum(BIG)
    started = start_mid_transfer(clusters, pairing, model)
    with frozen(beta):
        wait_for_bytes(alpha.owner(), started["id"], RANGE)
        paused = ok(pause(alpha.owner(), started["id"]))
        assert paused["state"] == "paused"
        assert paused["error"] is None
        assert RANGE <= paused["bytes_done"] < total
        assert partial_file(alpha, started["id"], 0).stat().st_size >= paused["bytes_done"]
    # Nothing moves while it is paused, even with the grantor delivering again.
    assert show(alpha.owner(), started["id"])["bytes_done"] == paused["bytes_done"]
    assert ok(pause(alpha.owner(), started["id"]))["state"] == "paused"

    resumed = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
    assert resumed["id"] == started["id"]
    assert resumed["state"] in ("running", "verifying", "complete")
    lowest = resumed["bytes_done"]

    def finished() -> dict[str, Any] | None:
        nonlocal lowest
        current = show(alpha.owner(), started["id"])
        lowest = min(lowest, current["bytes_done"])
        return current if current["state"] not in ("running", "verifying") else None

    done = wait_for(finished, seconds=60, what="the resumed transfer finished")
    assert lowest >= paused["bytes_done"] - RANGE
    assert_registered(alpha, done, model)
    assert total <= transfer_bytes_served(beta, grant) <= total + RANGE


def test_a_requester_killed_mid_file_resumes_after_restart_refetching_at_most_one_range(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    model, grant = granted_model(clusters, pairing, tmp_path, "killed-requester", BIG)
    total = sum(BIG)
    started = start_mid_transfer(clusters, pairing, model)
    with frozen(clusters.beta):
        recorded = wait_for_bytes(clusters.alpha.owner(), started["id"], RANGE)["bytes_done"]
        clusters.alpha.stop(signal.SIGKILL)
    alpha = clusters.restart_alpha()
    after = show(alpha.owner(), started["id"])
    assert after["state"] == "paused"
    assert "restarted" in after["error"]
    assert recorded <= after["bytes_done"] < total
    resumed = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
    assert resumed["bytes_done"] == after["bytes_done"]
    done = wait_until(alpha.owner(), started["id"], what="the resumed transfer finished")
    assert_registered(alpha, done, model)
    served = transfer_bytes_served(clusters.beta, grant)
    assert total <= served <= total + RANGE, f"re-fetched {served - total} bytes"


def test_a_grantor_killed_mid_range_pauses_the_requester_with_an_error_and_resumes_later(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    model, grant = granted_model(clusters, pairing, tmp_path, "killed-grantor", BIG)
    total = sum(BIG)
    address = hypernet_address(clusters.beta)
    started = start_mid_transfer(clusters, pairing, model)
    clusters.beta.stop(signal.SIGKILL)
    paused = wait_until(
        clusters.alpha.owner(),
        started["id"],
        seconds=3 * STALL_SECONDS + 15,
        what="the requester noticed the grantor is gone",
    )
    assert paused["state"] == "paused", paused
    assert paused["error"], "a paused transfer says why"
    assert paused["bytes_done"] < total
    beta = clusters.restart_beta(address)
    wait_for_peer(clusters, pairing)
    ok(acquire(clusters.alpha.owner(), pairing.requester_peer, model["id"]), 202)
    done = wait_until(clusters.alpha.owner(), started["id"], what="the transfer finished")
    assert_registered(clusters.alpha, done, model)
    # The killed grantor never refunded the range it had reserved: at most one range more.
    served = transfer_bytes_served(beta, grant)
    assert total <= served <= total + RANGE, f"re-fetched {served - total} bytes"


def wait_for_peer(clusters: Clusters, pairing: Pairing) -> None:
    """Until the restarted grantor answers the requester again (a refresh goes through)."""
    wait_for(
        lambda: refresh(clusters.alpha.owner(), pairing.requester_peer).status_code == 200,
        seconds=30,
        what="the restarted grantor reachable again",
    )


def test_a_corrupted_byte_in_the_grantors_blob_fails_verification_and_registers_nothing(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    model, _ = granted_model(clusters, pairing, tmp_path, "corrupt", [2 * RANGE + 5, MiB])
    first = model["manifest"]["files"][0]
    stored = blob_path(beta, first["sha256"])
    stored.chmod(0o644)
    with stored.open("r+b") as blob:
        blob.seek(RANGE + 100)
        byte = blob.read(1)
        blob.seek(RANGE + 100)
        blob.write(bytes([byte[0] ^ 0x01]))
    stored.chmod(0o444)
    models_before = models_of(alpha)
    started = ok(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 202)
    failed = wait_until(alpha.owner(), started["id"], what="verification of the corrupted file")
    assert failed["state"] == "failed", failed
    assert "verification" in failed["error"]
    assert failed["local_model"] is None
    assert models_of(alpha) == models_before
    assert not any(m["sha256"] == model["sha256"] for m in models_of(alpha))
    assert not blob_path(alpha, first["sha256"]).exists()
    assert not partial_file(alpha, started["id"], 0).exists()


def test_an_allowance_smaller_than_the_model_is_refused_before_any_range_is_sent(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    alpha, beta = clusters.alpha, clusters.beta
    allowance = RANGE + MiB
    model, grant = granted_model(
        clusters, pairing, tmp_path, "allowance", [2 * RANGE + MiB], transfer_bytes=allowance
    )
    ok(refresh(alpha.owner(), pairing.requester_peer))
    requests_before = grant_view(beta, grant)["remaining"]["requests"]
    transfers_before = len(overview(alpha.owner())["transfers"])
    # The requester knows the grant's remaining allowance: it does not even ask.
    refused = error_of(acquire(alpha.owner(), pairing.requester_peer, model["id"]), 429)
    assert refused["code"] == "limit_exceeded"
    assert refused["details"]["limit"] == "transfer_bytes"
    assert refused["details"]["remaining"] == allowance
    assert len(overview(alpha.owner())["transfers"]) == transfers_before
    # At most the manifest was read (one request); no range was asked for.
    assert requests_before - grant_view(beta, grant)["remaining"]["requests"] <= 1
    assert transfer_bytes_served(beta, grant) == 0
    # The grantor refuses a range past the allowance by itself, and charges none of it.
    entry = model["manifest"]["files"][0]
    past = alpha.owner().post(
        f"{API}/peers/{pairing.requester_peer}/request",
        json={
            "operation": "models.range",
            "body": {
                "model": model["id"],
                "file": entry["path"],
                "offset": 0,
                "length": allowance + 1,
                "digest": entry["sha256"],
            },
        },
    )
    assert error_of(past, 429)["details"]["limit"] == "transfer_bytes"
    assert transfer_bytes_served(beta, grant) == 0
    assert not any(m["sha256"] == model["sha256"] for m in models_of(alpha))


def acquire_command(clusters: Clusters, pairing: Pairing, model: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ficc",
        "federation-acquire",
        "--state-dir",
        str(clusters.alpha.state_dir),
        pairing.requester_peer,
        model,
        *extra,
    ]


def test_the_acquire_command_exits_0_with_the_completed_transfer(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    model, _ = granted_model(clusters, pairing, tmp_path, "cli-complete", [RANGE + 1, MiB])
    result = ficc(
        "federation-acquire",
        pairing.requester_peer,
        model["id"],
        "--deadline",
        "60",
        state_dir=clusters.alpha.state_dir,
    )
    assert result.returncode == 0, result.stderr
    transfer = json.loads(result.stdout)
    assert_registered(clusters.alpha, transfer, model)


def test_the_acquire_command_pauses_and_exits_4_at_its_deadline_and_resumes_when_run_again(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    model, grant = granted_model(clusters, pairing, tmp_path, "cli-deadline", BIG)
    command = acquire_command(clusters, pairing, model["id"], "--deadline", "2")
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as cli:
        transfer_id = wait_for_transfer_of(clusters, model["id"])
        wait_for_partial(clusters.alpha, transfer_id, 1)
        with frozen(clusters.beta):
            stdout, stderr = cli.communicate(timeout=30)
            assert cli.returncode == 4, stderr
            shown = json.loads(stdout)
            assert shown["state"] == "paused"
            assert b"deadline" in stderr
            assert show(clusters.alpha.owner(), transfer_id)["state"] == "paused"
    result = ficc(
        "federation-acquire",
        pairing.requester_peer,
        model["id"],
        state_dir=clusters.alpha.state_dir,
    )
    assert result.returncode == 0, result.stderr
    assert_registered(clusters.alpha, json.loads(result.stdout), model)
    assert transfer_bytes_served(clusters.beta, grant) <= sum(BIG) + RANGE


def test_ctrl_c_pauses_the_acquire_command_which_exits_130(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    model, _ = granted_model(clusters, pairing, tmp_path, "cli-interrupt", BIG)
    command = acquire_command(clusters, pairing, model["id"], "--deadline", "120")
    # A terminal-compatible stderr makes the progress bar draw at once: it shows the command
    # is following the transfer when the interrupt arrives.
    environment = {**os.environ, "TTY_COMPATIBLE": "1"}
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        preexec_fn=with_default_ctrl_c,
    ) as cli:
        assert cli.stderr is not None
        assert cli.stdout is not None
        stderr, stdout = Collected(cli.stderr), Collected(cli.stdout)
        transfer_id = wait_for_transfer_of(clusters, model["id"])
        wait_for(lambda: transfer_id.encode() in stderr.text(), what="the progress bar")
        wait_for_partial(clusters.alpha, transfer_id, 1)
        # Ctrl-C at once: a frozen grantor stalls the transfer, which FICC pauses by itself
        # after the stall setting (the command then exits 1, not 130).
        with frozen(clusters.beta):
            cli.send_signal(signal.SIGINT)
            assert cli.wait(timeout=30) == 130, (stderr.text(), stdout.text())
            assert show(clusters.alpha.owner(), transfer_id)["state"] == "paused"
        assert b'"reason": "interrupted"' in stderr.text()


def test_the_pause_command_pauses_a_running_transfer_and_refuses_a_completed_one(
    clusters: Clusters, pairing: Pairing, tmp_path: Path
) -> None:
    model, _ = granted_model(clusters, pairing, tmp_path, "cli-pause", BIG)
    started = start_mid_transfer(clusters, pairing, model)
    with frozen(clusters.beta):
        result = ficc("federation-pause", started["id"], state_dir=clusters.alpha.state_dir)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["state"] == "paused"
    assert show(clusters.alpha.owner(), started["id"])["state"] == "paused"
    ok(acquire(clusters.alpha.owner(), pairing.requester_peer, model["id"]), 202)
    done = wait_until(clusters.alpha.owner(), started["id"])
    assert_registered(clusters.alpha, done, model)
    refused = ficc("federation-pause", started["id"], state_dir=clusters.alpha.state_dir)
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["code"] == "conflict"


class Collected:
    """Everything a child wrote to a pipe so far, read by a thread (so tests never block)."""

    def __init__(self, pipe: Any) -> None:
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: Any) -> None:
        for chunk in iter(lambda: pipe.read1(4096), b""):
            with self._lock:
                self._chunks.append(chunk)

    def text(self) -> bytes:
        with self._lock:
            return b"".join(self._chunks)


def wait_for_transfer_of(clusters: Clusters, model: str) -> str:
    """The ID of alpha's transfer of ``model``, once the command started it."""

    def started() -> str | None:
        for transfer in overview(clusters.alpha.owner())["transfers"]:
            if transfer["model"] == model:
                return str(transfer["id"])
        return None

    return wait_for(started, what=f"a transfer of {model}")
