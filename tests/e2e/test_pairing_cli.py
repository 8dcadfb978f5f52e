"""The federation-* commands through the real `ficc` entry point, against two real clusters.

Exit status: 0 done, 1 refused by FICC, 2 usage error, 3 no server running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.federation import configure, offer_in, overview, peer_in, wait_for


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    root = tmp_path_factory.mktemp("cli")
    alpha = start_cluster(root / "alpha")
    beta = start_cluster(root / "beta")
    try:
        yield alpha, beta
    finally:
        alpha.stop()
        beta.stop()


def run(cluster: RunningCluster, *args: str, stdin: str | None = None) -> Any:
    """Run a command that must succeed; its JSON result."""
    result = ficc(*args, state_dir=cluster.state_dir, stdin=stdin)
    assert result.returncode == 0, f"{args}: {result.returncode} {result.stderr}"
    return json.loads(result.stdout)


def refused(
    cluster: RunningCluster | Path, *args: str, status: int, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    state_dir = cluster if isinstance(cluster, Path) else cluster.state_dir
    result = ficc(*args, state_dir=state_dir, stdin=stdin)
    assert result.returncode == status, f"{args}: {result.returncode} {result.stderr}"
    assert result.stdout == ""
    return result


def error_code(result: subprocess.CompletedProcess[str]) -> str:
    return str(json.loads(result.stderr)["error"]["code"])


def test_the_federation_commands_take_a_pairing_from_configuration_to_forget(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    alpha, beta = clusters
    configured = run(
        alpha, "federation-configure", "--agent-directory", str(tmp_path / "a"), "--label", "al"
    )
    assert configured["companion"]["state"] == "running"
    assert configured["identity"]["label"] == "al"
    body = tmp_path / "configure.json"
    body.write_text(json.dumps({"agent_directory": str(tmp_path / "b"), "label": "be"}))
    run(beta, "federation-configure", "--input", str(body))
    status = run(beta, "federation-status")
    assert status["companion"]["agent_directory"] == str(tmp_path / "b")
    service = status["identity"]

    offer = run(
        alpha,
        "federation-pair",
        "--service",
        service["hypernet_id"],
        "--ticket",
        service["ticket"],
        "--scope",
        "discover",
        "--scope",
        "resources:read",
    )
    assert offer["state"] == "sent"
    assert offer["scopes"] == ["discover", "resources:read"]
    incoming = offer_in(run(beta, "federation-status"), offer["id"])
    assert incoming is not None
    assert incoming["state"] == "received"

    approval = json.dumps({"revision": 1, "grant": {"scopes": ["discover"]}})
    approved = run(beta, "federation-approve", offer["id"], "--input", "-", stdin=approval)
    assert approved["state"] == "approved"
    digest = approved["receipt"]["digest"]
    # The same approval again is refused by FICC: the offer moved on.
    stale = refused(
        beta, "federation-approve", offer["id"], "--input", "-", stdin=approval, status=1
    )
    assert error_code(stale) == "revision_mismatch"

    wrong = "f" * 64 if digest != "f" * 64 else "e" * 64
    assert error_code(
        refused(alpha, "federation-finish", offer["id"], "--receipt", wrong, status=1)
    )
    finished = run(alpha, "federation-finish", offer["id"], "--receipt", digest)
    peer = finished["peer"]
    assert peer["state"] == "paired"
    first = peer["selected"]
    service_peer = offer_in(overview(beta.owner()), offer["id"])
    assert service_peer is not None
    beta_peer = service_peer["peer"]

    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps({"scopes": ["resources:read"], "concurrent": 1}))
    second = run(beta, "federation-grant", beta_peer, "--input", str(grant_file))
    assert (second["state"], second["concurrent"]) == ("active", 1)
    listed = run(alpha, "federation-refresh", peer["id"])
    assert {item["id"] for item in listed["remote_grants"]} == {first, second["id"]}
    selected = run(alpha, "federation-refresh", peer["id"], "--grant", second["id"])
    assert selected["selected"] == second["id"]

    revoked = run(beta, "federation-revoke", first)
    assert (revoked["state"], revoked["told"]) == ("revoked", True)
    assert error_code(refused(beta, "federation-revoke", first, status=1)) == "conflict"
    assert error_code(refused(beta, "federation-retire", second["id"], status=1)) == "conflict"
    assert run(beta, "federation-retire", first)["state"] == "retired"

    removed = run(beta, "federation-remove", beta_peer)
    assert removed["told"] is True
    wait_for(
        lambda: (peer_in(overview(alpha.owner()), peer["id"]) or {}).get("state") == "removed",
        what="the requester sees the removal",
    )
    not_yet = refused(beta, "federation-forget", beta_peer, status=1)
    assert second["id"] in json.loads(not_yet.stderr)["error"]["message"]
    run(beta, "federation-retire", second["id"])
    assert run(beta, "federation-forget", beta_peer) == {"peer": beta_peer, "forgotten": True}
    run(alpha, "federation-forget", peer["id"])
    assert run(alpha, "federation-status")["peers"] == []
    assert run(beta, "federation-status")["grants"] == []


def test_federation_remove_with_offer_discards_an_unaccepted_offer_on_both_sides(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    for cluster, label in ((alpha, "alpha"), (beta, "beta")):
        if overview(cluster.owner())["companion"]["state"] != "running":
            configure(cluster, label)
    service = overview(beta.owner())["identity"]
    body = json.dumps({"service": service["hypernet_id"], "scopes": ["discover"]})
    offer = run(alpha, "federation-pair", "--input", "-", stdin=body)
    discarded = run(alpha, "federation-remove", "--offer", offer["id"])
    assert (discarded["state"], discarded["told"]) == ("discarded", True)
    incoming = offer_in(overview(beta.owner()), offer["id"])
    assert incoming is not None
    assert incoming["state"] == "discarded"
    again = refused(alpha, "federation-remove", "--offer", offer["id"], status=1)
    assert error_code(again) == "conflict"
    approval = json.dumps({"revision": 2, "grant": {"scopes": ["discover"]}})
    late = refused(
        beta, "federation-approve", offer["id"], "--input", "-", stdin=approval, status=1
    )
    assert error_code(late) == "conflict"


def test_refusals_by_ficc_exit_with_status_one_and_the_json_error_on_stderr(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, _ = clusters
    unknown_peer = "per_" + "a" * 26
    result = refused(alpha, "federation-refresh", unknown_peer, status=1)
    assert error_code(result) == "not_found"
    result = refused(
        alpha, "federation-pair", "--service", "nothex", "--scope", "discover", status=1
    )
    assert error_code(result) == "invalid_request"
    result = refused(
        alpha, "federation-pair", "--service", "a" * 64, "--scope", "everything", status=1
    )
    assert error_code(result) == "invalid_request"


USAGE_ERRORS: list[tuple[str, ...]] = [
    ("federation-approve", "ofr_" + "a" * 26),
    ("federation-grant", "per_" + "a" * 26),
    ("federation-pair", "--service", "a" * 64),
    ("federation-configure",),
    ("federation-finish", "ofr_" + "a" * 26),
    ("federation-finish", "ofr_" + "a" * 26, "--receipt", "a" * 64, "--input", "-"),
    ("federation-remove",),
    ("federation-remove", "per_" + "a" * 26, "--offer", "ofr_" + "a" * 26),
    ("federation-revoke",),
    ("federation-refresh",),
]


def test_a_usage_error_exits_with_status_two_and_touches_nothing(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, _ = clusters
    before = overview(alpha.owner())
    for args, result in zip(USAGE_ERRORS, ficc_all(alpha.state_dir, USAGE_ERRORS), strict=True):
        assert result.returncode == 2, f"{args}: {result.returncode} {result.stderr}"
        assert result.stdout == ""
    after = overview(alpha.owner())
    assert (after["offers"], after["peers"]) == (before["offers"], before["peers"])


def ficc_all(
    state_dir: Path, commands: list[tuple[str, ...]], stdin: str = ""
) -> list[subprocess.CompletedProcess[str]]:
    """Run several `ficc` commands at once (each start costs a second of imports)."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "ficc", *args, "--state-dir", str(state_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    results = []
    for args, process in zip(commands, processes, strict=True):
        stdout, stderr = process.communicate(stdin, timeout=60)
        results.append(subprocess.CompletedProcess(args, process.returncode, stdout, stderr))
    return results


def test_an_input_file_that_is_not_json_is_a_usage_error(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    alpha, _ = clusters
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    refused(alpha, "federation-approve", "ofr_" + "a" * 26, "--input", str(broken), status=2)
    refused(alpha, "federation-grant", "per_" + "a" * 26, "--input", str(tmp_path / "no"), status=2)


NEEDING_A_SERVER: list[tuple[str, ...]] = [
    ("federation-status",),
    ("federation-configure", "--agent-directory", "/tmp/unused-agent"),
    ("federation-pair", "--service", "a" * 64, "--scope", "discover"),
    ("federation-approve", "ofr_" + "a" * 26, "--input", "-"),
    ("federation-finish", "ofr_" + "a" * 26, "--receipt", "a" * 64),
    ("federation-remove", "per_" + "a" * 26),
    ("federation-remove", "--offer", "ofr_" + "a" * 26),
    ("federation-grant", "per_" + "a" * 26, "--input", "-"),
    ("federation-revoke", "grt_" + "a" * 26),
    ("federation-refresh", "per_" + "a" * 26),
    ("federation-retire", "grt_" + "a" * 26),
    ("federation-forget", "per_" + "a" * 26),
]


def test_with_no_server_running_every_command_exits_with_status_three_naming_serve(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "nothing"
    results = ficc_all(state_dir, NEEDING_A_SERVER, stdin='{"revision": 1}')
    for args, result in zip(NEEDING_A_SERVER, results, strict=True):
        assert result.returncode == 3, f"{args}: {result.returncode} {result.stderr}"
        assert result.stdout == ""
        assert "ficc serve" in json.loads(result.stderr)["error"]["message"]
    assert not (state_dir / "ficc.db").exists()
