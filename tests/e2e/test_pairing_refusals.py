"""Every refusal of approval and of finish, between real clusters over real HyperNet.

A refused approval leaves the offer as it was (still received, same revision) and creates no
peer and no grant; a refused finish pairs nothing on either side.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import (
    API,
    DISCOVER_GRANT,
    add_service,
    approve,
    configure,
    error_of,
    finish,
    offer_in,
    ok,
    overview,
    send_offer,
    wait_for,
)

KiB, MiB, TiB = 1024, 1024**2, 1024**4
DAY = 86400
UNKNOWN_SERVICE = "svc_" + "a" * 26


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    """alpha asks for access; beta is the service's cluster (with a second project)."""
    root = tmp_path_factory.mktemp("refusals")
    alpha = start_cluster(root / "alpha")
    beta = start_cluster(root / "beta")
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        ok(beta.owner().post("/api/v1/projects", json={"name": "other"}), 201)
        yield alpha, beta
    finally:
        alpha.stop()
        beta.stop()


@pytest.fixture(scope="module")
def received(clusters: tuple[RunningCluster, RunningCluster]) -> str:
    """One offer for discover and inference:invoke, received by beta; refusals share it."""
    alpha, beta = clusters
    return str(send_offer(alpha.owner(), beta, ["discover", "inference:invoke"])["id"])


@pytest.fixture(scope="module")
def services(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    _, beta = clusters
    directory = tmp_path_factory.mktemp("models")
    return {
        "own": add_service(beta, "own", directory),
        "other": add_service(beta, "theirs", directory, project="other"),
    }


class Unchanged:
    """Beta's peers and grants before a refusal; after it they, and the offer, are the same."""

    def __init__(self, beta: RunningCluster, offer_id: str) -> None:
        self.beta, self.offer_id = beta, offer_id
        self.before = self.relationships()

    def relationships(self) -> tuple[list[Any], list[Any]]:
        view = overview(self.beta.owner())
        return (
            [(peer["id"], peer["state"]) for peer in view["peers"]],
            [(grant["id"], grant["state"]) for grant in view["grants"]],
        )

    def check(self) -> None:
        offer = offer_in(overview(self.beta.owner()), self.offer_id)
        assert offer is not None
        assert (offer["state"], offer["revision"], offer["receipt"]) == ("received", 1, None)
        assert self.relationships() == self.before


# The rules of each field are tested in tests/unit/domain/test_grants.py; here, one of them
# travels the HTTP path, and the one rule that needs the cluster (the service must exist).
OUT_OF_RANGE: list[tuple[str, dict[str, Any]]] = [
    ("grant.concurrent", {"concurrent": 17}),
    ("grant.services[0]", {"services": [UNKNOWN_SERVICE]}),
]


@pytest.mark.parametrize(
    ("field", "change"), OUT_OF_RANGE, ids=[f"{f}={v}" for f, v in OUT_OF_RANGE]
)
def test_approval_outside_the_allowed_range_is_refused_naming_the_field_and_changes_nothing(
    clusters: tuple[RunningCluster, RunningCluster],
    received: str,
    field: str,
    change: dict[str, Any],
) -> None:
    _, beta = clusters
    unchanged = Unchanged(beta, received)
    grant = {"scopes": ["discover"], **change}
    error = error_of(approve(beta.owner(), received, grant), 400)
    assert error["code"] == "invalid_request"
    assert error["details"]["field"] == field, error
    assert field in error["message"]
    unchanged.check()


def test_each_maximum_itself_is_accepted_by_approval(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    offer_id = send_offer(alpha.owner(), beta, ["discover"])["id"]
    maxima = {
        "scopes": ["discover"],
        "lifetime": 30 * DAY,
        "concurrent": 16,
        "requests": 1_000_000,
        "transfer_bytes": 16 * TiB,
        "response_bytes": 256 * MiB,
        "request_bytes": 64 * MiB,
    }
    approved = ok(approve(beta.owner(), offer_id, maxima))
    terms = approved["receipt"]["body"]["grant_terms"]
    assert {name: terms[name] for name in maxima} == maxima
    # An approved offer is not discarded: its pending peer is removed, revoking the grant.
    ok(beta.owner().delete(f"{API}/peers/{approved['peer']}"))


def test_approving_with_another_projects_service_is_refused_and_changes_nothing(
    clusters: tuple[RunningCluster, RunningCluster], received: str, services: dict[str, str]
) -> None:
    _, beta = clusters
    unchanged = Unchanged(beta, received)
    grant = {"scopes": ["inference:invoke"], "services": [services["other"]]}
    error = error_of(approve(beta.owner(), received, grant), 400)
    assert error["details"]["field"] == "grant.services[0]"
    unchanged.check()


def test_approving_with_a_service_of_the_project_is_not_refused_for_its_id(
    clusters: tuple[RunningCluster, RunningCluster], services: dict[str, str]
) -> None:
    alpha, beta = clusters
    offer_id = send_offer(alpha.owner(), beta, ["inference:invoke"])["id"]
    grant = {"scopes": ["inference:invoke"], "services": [services["own"]]}
    approved = ok(approve(beta.owner(), offer_id, grant))
    assert approved["receipt"]["body"]["grant_terms"]["services"] == [services["own"]]
    ok(beta.owner().delete(f"{API}/peers/{approved['peer']}"))


def test_approving_without_the_delegated_local_scope_is_forbidden_and_changes_nothing(
    clusters: tuple[RunningCluster, RunningCluster], received: str
) -> None:
    _, beta = clusters
    unchanged = Unchanged(beta, received)
    manager = beta.client(beta.token("federation:manage", "federation:read", "inference:invoke"))
    error = error_of(approve(manager, received, {"scopes": ["discover"]}), 403)
    assert error["code"] == "forbidden"
    assert error["details"]["missing_scope"] == "discover"
    unchanged.check()


def test_approving_without_federation_manage_is_forbidden_and_changes_nothing(
    clusters: tuple[RunningCluster, RunningCluster], received: str
) -> None:
    _, beta = clusters
    unchanged = Unchanged(beta, received)
    reader = beta.client(beta.token("federation:read", "discover"))
    error = error_of(approve(reader, received, {"scopes": ["discover"]}), 403)
    assert error["details"]["missing_scope"] == "federation:manage"
    unchanged.check()


@pytest.mark.parametrize("revision", [0, 2, 99])
def test_approving_at_a_stale_revision_is_a_revision_mismatch_and_changes_nothing(
    clusters: tuple[RunningCluster, RunningCluster], received: str, revision: int
) -> None:
    _, beta = clusters
    unchanged = Unchanged(beta, received)
    error = error_of(approve(beta.owner(), received, DISCOVER_GRANT, revision=revision), 409)
    assert error["code"] == "revision_mismatch"
    unchanged.check()


def test_approving_an_unknown_offer_is_not_found(
    clusters: tuple[RunningCluster, RunningCluster], received: str
) -> None:
    _, beta = clusters
    unchanged = Unchanged(beta, received)
    error = error_of(approve(beta.owner(), "ofr_" + "b" * 26, DISCOVER_GRANT), 404)
    assert error["code"] == "not_found"
    unchanged.check()


def test_the_requester_cannot_approve_its_own_outgoing_offer(
    clusters: tuple[RunningCluster, RunningCluster], received: str
) -> None:
    alpha, beta = clusters
    unchanged = Unchanged(beta, received)
    error = error_of(approve(alpha.owner(), received, DISCOVER_GRANT), 409)
    assert error["code"] == "conflict"
    unchanged.check()


def test_after_all_refusals_the_offer_is_still_approvable_at_revision_one(
    clusters: tuple[RunningCluster, RunningCluster], received: str
) -> None:
    alpha, beta = clusters
    approved = ok(approve(beta.owner(), received, DISCOVER_GRANT, revision=1))
    assert (approved["state"], approved["revision"]) == ("approved", 2)
    # A second approval of the same offer is refused: it is no longer received.
    error_of(approve(beta.owner(), received, DISCOVER_GRANT, revision=2), 409)
    wait_for(
        lambda: (offer_in(overview(alpha.owner()), received) or {}).get("state") == "accepted",
        what="the requester receives the receipt",
    )


# --- finish ------------------------------------------------------------------------------------


def approved_offer(alpha: RunningCluster, beta: RunningCluster) -> tuple[str, str]:
    """A fresh offer, approved by beta, whose receipt alpha holds: (offer ID, digest)."""
    offer_id = send_offer(alpha.owner(), beta, ["discover"])["id"]
    digest = ok(approve(beta.owner(), offer_id, DISCOVER_GRANT))["receipt"]["digest"]
    wait_for(
        lambda: (offer_in(overview(alpha.owner()), offer_id) or {}).get("state") == "accepted",
        what="the requester receives the receipt",
    )
    return offer_id, digest


def assert_not_paired(alpha: RunningCluster, beta: RunningCluster, offer_id: str) -> None:
    requester = offer_in(overview(alpha.owner()), offer_id)
    service = offer_in(overview(beta.owner()), offer_id)
    assert requester is not None
    assert requester["state"] == "accepted"
    assert service is not None
    assert service["state"] == "approved"
    assert [p for p in overview(alpha.owner())["peers"] if p["state"] == "paired"] == []
    assert [p for p in overview(beta.owner())["peers"] if p["state"] == "paired"] == []


def test_finishing_with_another_digest_is_a_conflict_and_pairs_nothing(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    offer_id, digest = approved_offer(alpha, beta)
    wrong = ("0" if digest[0] != "0" else "1") + digest[1:]
    error = error_of(finish(alpha.owner(), offer_id, wrong), 409)
    assert error["code"] == "conflict"
    assert_not_paired(alpha, beta, offer_id)


def test_finishing_with_the_receipt_of_another_offer_is_refused(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    first, _ = approved_offer(alpha, beta)
    _, second_digest = approved_offer(alpha, beta)
    error = error_of(finish(alpha.owner(), first, second_digest), 409)
    assert error["code"] == "conflict"
    assert_not_paired(alpha, beta, first)


def test_finishing_a_malformed_digest_is_invalid_input(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    offer_id, digest = approved_offer(alpha, beta)
    error = error_of(finish(alpha.owner(), offer_id, digest.upper()), 400)
    assert error["details"]["field"] == "receipt"
    assert_not_paired(alpha, beta, offer_id)


def test_only_the_requester_finishes_and_a_received_offer_cannot_be_finished(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    offer_id, digest = approved_offer(alpha, beta)
    error_of(finish(beta.owner(), offer_id, digest), 409)
    unapproved = send_offer(alpha.owner(), beta, ["discover"])["id"]
    error_of(finish(alpha.owner(), unapproved, digest), 409)
    assert_not_paired(alpha, beta, offer_id)


def edit_stored_receipt(state_dir: Path, offer_id: str, edit: Any) -> None:
    """Change the receipt the requester stored for ``offer_id``, in its SQLite database."""
    with sqlite3.connect(state_dir / "ficc.db") as db:
        (text,) = db.execute("SELECT receipt FROM offers WHERE id = ?", (offer_id,)).fetchone()
        receipt = edit(json.loads(text))
        db.execute("UPDATE offers SET receipt = ? WHERE id = ?", (json.dumps(receipt), offer_id))
    db.close()


def test_simulating_a_tampered_stored_receipt_the_finish_is_refused(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    """The receipt is edited in the requester's database while its server is stopped."""
    _, beta = clusters
    gamma = start_cluster(tmp_path / "gamma")
    try:
        configure(gamma, "gamma")
        widened, widened_digest = approved_offer(gamma, beta)
        resigned, resigned_digest = approved_offer(gamma, beta)
        swapped, _ = approved_offer(gamma, beta)
        other, other_digest = approved_offer(gamma, beta)
        gamma.stop()
        other_receipt: dict[str, Any] = {}

        def widen(receipt: dict[str, Any]) -> dict[str, Any]:
            receipt["body"]["grant_terms"]["requests"] = 1_000_000
            return receipt

        def widen_and_rehash(receipt: dict[str, Any]) -> dict[str, Any]:
            receipt["body"]["grant_terms"]["concurrent"] = 16
            receipt["digest"] = hashlib.sha256(rfc8785.dumps(receipt["body"])).hexdigest()
            return receipt

        def keep(receipt: dict[str, Any]) -> dict[str, Any]:
            other_receipt.update(receipt)
            return receipt

        edit_stored_receipt(gamma.state_dir, widened, widen)
        edit_stored_receipt(gamma.state_dir, resigned, widen_and_rehash)
        edit_stored_receipt(gamma.state_dir, other, keep)
        edit_stored_receipt(gamma.state_dir, swapped, lambda _: dict(other_receipt))
        with sqlite3.connect(gamma.state_dir / "ficc.db") as db:
            (text,) = db.execute("SELECT receipt FROM offers WHERE id = ?", (resigned,)).fetchone()
        db.close()
        rehashed_digest = json.loads(text)["digest"]
        assert rehashed_digest != resigned_digest

        gamma = start_cluster(gamma.state_dir)
        wait_for(
            lambda: overview(gamma.owner())["companion"]["state"] == "running",
            what="the companion restarts",
        )
        # The body no longer hashes to the digest.
        assert error_of(finish(gamma.owner(), widened, widened_digest), 409)
        # The digest matches the edited body, but the service's signature does not.
        assert error_of(finish(gamma.owner(), resigned, rehashed_digest), 409)
        # A genuine, signed receipt, but it answers another offer.
        assert error_of(finish(gamma.owner(), swapped, other_digest), 409)
        for offer_id in (widened, resigned, swapped):
            assert_not_paired(gamma, beta, offer_id)
    finally:
        gamma.stop()
