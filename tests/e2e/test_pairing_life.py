"""The life of a pairing between two real clusters over real HyperNet on loopback:
offer, approval, finish, grants, refresh, revocation, retirement, removal and forgetting."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster
from tests.support.federation import (
    API,
    DISCOVER_GRANT,
    add_service,
    approve,
    audit_entries,
    configured_pair,
    error_of,
    finish,
    grant_in,
    identity,
    offer_in,
    ok,
    overview,
    peer_in,
    refresh,
    send_offer,
    wait_for,
)

HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    """alpha asks for access; beta is the service's cluster. Both companions configured."""
    with configured_pair(tmp_path_factory.mktemp("life")) as pair_:
        yield pair_


def remote_grant(view: dict[str, Any], peer_id: str, grant_id: str) -> dict[str, Any] | None:
    peer = peer_in(view, peer_id)
    assert peer is not None
    return next((item for item in peer["remote_grants"] if item["id"] == grant_id), None)


def test_a_configured_companion_shows_its_state_hypernet_id_addresses_and_identity(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    for cluster, label in ((alpha, "alpha"), (beta, "beta")):
        view = overview(cluster.owner())
        companion, who = view["companion"], view["identity"]
        assert companion["configured"] is True
        assert companion["state"] == "running"
        assert companion["error"] is None
        assert HEX64.match(companion["hypernet_id"])
        assert companion["addresses"]
        assert all(a.startswith(("127.0.0.1:", "[::1]:")) for a in companion["addresses"])
        assert who["label"] == label
        assert who["hypernet_id"] == companion["hypernet_id"]
        assert who["cluster_key"]
        assert who["ticket"]
        assert view["project"] == "default"
    assert identity(alpha)["hypernet_id"] != identity(beta)["hypernet_id"]
    assert identity(alpha)["cluster_key"] != identity(beta)["cluster_key"]


def test_the_whole_life_of_a_pairing_from_offer_to_forget(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    alpha, beta = clusters
    a, b = alpha.owner(), beta.owner()
    alpha_id, beta_id = identity(alpha), identity(beta)
    ok(b.post("/api/v1/projects", json={"name": "other"}), 201)
    other = beta.client(
        beta.token("federation:manage", "federation:read", projects=["other"]),
        **{"X-FICC-Project": "other"},
    )

    # The offer is delivered at once and has the same ID on both sides.
    sent = send_offer(a, beta, ["discover", "inference:invoke"])
    offer_id = sent["id"]
    assert sent["direction"] == "outgoing"
    assert sent["state"] == "sent"
    assert sent["service"] == beta_id["hypernet_id"]
    assert sent["scopes"] == ["discover", "inference:invoke"]
    assert sent["receipt"] is None
    incoming = offer_in(overview(b), offer_id)
    assert incoming is not None
    assert incoming["direction"] == "incoming"
    assert incoming["state"] == "received"
    assert incoming["revision"] == 1
    assert incoming["scopes"] == ["discover", "inference:invoke"]
    assert incoming["requester"] == alpha_id["hypernet_id"]
    seen_by_other = offer_in(overview(other), offer_id)
    assert seen_by_other is not None
    assert seen_by_other["state"] == "received"

    # Approval signs a receipt; both sides show it with its digest.
    approved = ok(approve(b, offer_id, DISCOVER_GRANT))
    assert approved["state"] == "approved"
    assert approved["receipt_delivered"] is True
    digest = approved["receipt"]["digest"]
    assert HEX64.match(digest)
    first_grant = approved["receipt"]["grant"]
    service_offer = offer_in(overview(b), offer_id)
    assert service_offer is not None
    assert service_offer["state"] == "approved"
    assert service_offer["revision"] == 2
    assert service_offer["receipt"]["digest"] == digest
    requester_offer = offer_in(overview(a), offer_id)
    assert requester_offer is not None
    assert requester_offer["state"] == "accepted"
    assert requester_offer["receipt"]["digest"] == digest
    assert offer_in(overview(other), offer_id) is None, "approval binds it to one project"

    # Finish completes the pairing on both sides; the first grant is selected.
    finished = ok(finish(a, offer_id, digest))
    assert finished["offer"]["state"] == "finished"
    requester_peer = finished["peer"]
    assert requester_peer["state"] == "paired"
    assert requester_peer["hypernet_id"] == beta_id["hypernet_id"]
    assert requester_peer["cluster_key"] == beta_id["cluster_key"]
    assert requester_peer["label"] == "beta"
    assert requester_peer["selected"] == first_grant
    view_b = overview(b)
    service_offer = offer_in(view_b, offer_id)
    assert service_offer is not None
    assert service_offer["state"] == "finished"
    service_peer = peer_in(view_b, service_offer["peer"])
    assert service_peer is not None
    assert service_peer["state"] == "paired"
    assert service_peer["hypernet_id"] == alpha_id["hypernet_id"]
    assert service_peer["cluster_key"] == alpha_id["cluster_key"]
    assert service_peer["label"] == "alpha"
    assert service_peer["generation"] >= 1
    given = grant_in(view_b, first_grant)
    assert given is not None
    assert given["state"] == "active"
    assert given["scopes"] == ["discover"]
    peer_a = peer_in(overview(a), requester_peer["id"])
    assert peer_a is not None
    assert peer_a["state"] == "paired"
    assert peer_a["selected"] == first_grant

    # Refresh lists the grant with in_flight and remaining.
    listed = ok(refresh(a, requester_peer["id"]))
    assert [item["id"] for item in listed["remote_grants"]] == [first_grant]
    item = listed["remote_grants"][0]
    assert item["state"] == "active"
    assert item["in_flight"] == 0
    assert item["remaining"] == {"requests": 1000, "transfer_bytes": 0, "tokens": None}
    assert item["lifetime"] == 86400
    assert item["concurrent"] == 2
    assert item["expires_at"]

    # A further grant, on an exact service of the project.
    service_id = add_service(beta, "tiny", tmp_path)
    further = ok(
        b.post(
            f"{API}/peers/{service_peer['id']}/grants",
            json={"scopes": ["inference:invoke"], "services": [service_id], "requests": 7},
        ),
        201,
    )
    second_grant = further["id"]
    assert further["state"] == "active"
    assert further["services"] == [service_id]
    assert further["remaining"] == {"requests": 7, "transfer_bytes": 0, "tokens": None}
    listed = ok(refresh(a, requester_peer["id"]))
    assert {item["id"] for item in listed["remote_grants"]} == {first_grant, second_grant}
    selected = ok(refresh(a, requester_peer["id"], grant=second_grant))
    assert selected["selected"] == second_grant

    # Revocation reaches the requester by the push, and by refresh.
    revoked = ok(b.delete(f"{API}/grants/{first_grant}"))
    assert revoked["state"] == "revoked"
    assert revoked["told"] is True
    wait_for(
        lambda: (
            (remote_grant(overview(a), requester_peer["id"], first_grant) or {}).get("state")
            == "revoked"
        ),
        what="the requester sees the revoked grant",
    )
    listed = ok(refresh(a, requester_peer["id"]))
    states = {item["id"]: item["state"] for item in listed["remote_grants"]}
    assert states == {first_grant: "revoked", second_grant: "active"}
    error_of(b.delete(f"{API}/grants/{first_grant}"), 409)

    # Retirement leaves a tombstone; the peer no longer lists it.
    retired = ok(b.post(f"{API}/grants/{first_grant}/retire"))
    assert retired["state"] == "retired"
    error_of(b.post(f"{API}/grants/{second_grant}/retire"), 409)
    listed = ok(refresh(a, requester_peer["id"]))
    assert [item["id"] for item in listed["remote_grants"]] == [second_grant]

    # Removal revokes every grant given to the peer and tells it.
    removed = ok(b.delete(f"{API}/peers/{service_peer['id']}"))
    assert removed["told"] is True
    assert removed["peer"]["state"] == "removed"
    grant_after = grant_in(overview(b), second_grant)
    assert grant_after is not None
    assert grant_after["state"] == "revoked"
    wait_for(
        lambda: (peer_in(overview(a), requester_peer["id"]) or {}).get("state") == "removed",
        what="the requester sees the pairing removed",
    )
    assert (remote_grant(overview(a), requester_peer["id"], second_grant) or {}).get(
        "state"
    ) == "revoked"
    error_of(refresh(a, requester_peer["id"]), 409)

    # Forget: refused while a grant is unretired, then done on both sides.
    refused = error_of(b.post(f"{API}/peers/{service_peer['id']}/forget"), 409)
    assert second_grant in refused["message"]
    assert refused["details"]["grants"] == [second_grant]
    ok(b.post(f"{API}/grants/{second_grant}/retire"))
    ok(b.post(f"{API}/peers/{service_peer['id']}/forget"))
    view_b = overview(b)
    assert peer_in(view_b, service_peer["id"]) is None
    assert grant_in(view_b, first_grant) is None
    assert grant_in(view_b, second_grant) is None
    ok(a.post(f"{API}/peers/{requester_peer['id']}/forget"))
    assert peer_in(overview(a), requester_peer["id"]) is None

    # The audit log keeps every step, with the proven identity of the peer.
    alpha_proven = {"hypernet_id": alpha_id["hypernet_id"], "cluster_key": alpha_id["cluster_key"]}
    beta_proven = {"hypernet_id": beta_id["hypernet_id"], "cluster_key": beta_id["cluster_key"]}
    on_beta = [
        ("offer.received", offer_id),
        ("offer.approved", offer_id),
        ("pairing.finished", service_peer["id"]),
        ("grant.created", second_grant),
        ("grant.revoked", first_grant),
        ("grant.retired", first_grant),
        ("peer.removed", service_peer["id"]),
        ("grant.retired", second_grant),
        ("peer.forgotten", service_peer["id"]),
    ]
    assert_audited(audit_entries(b), on_beta, alpha_proven)
    on_alpha = [
        ("offer.sent", offer_id),
        ("receipt.received", offer_id),
        ("pairing.finished", requester_peer["id"]),
        ("grant.selected", second_grant),
        ("remote_grant.revoked", first_grant),
        ("peer.removed_by_peer", requester_peer["id"]),
        ("peer.forgotten", requester_peer["id"]),
    ]
    assert_audited(audit_entries(a), on_alpha, beta_proven)


def assert_audited(
    entries: list[dict[str, Any]], steps: list[tuple[str, str]], peer: dict[str, str]
) -> None:
    """Each step appears, in this order, naming the peer's proven identity."""
    position = 0
    for action, target in steps:
        found = next(
            (
                index
                for index in range(position, len(entries))
                if entries[index]["action"] == action and entries[index]["target"] == target
            ),
            None,
        )
        assert found is not None, f"no audit entry {action} {target} after #{position}"
        assert entries[found]["peer"] == peer, entries[found]
        assert entries[found]["at"]
        position = found + 1
