"""`ficc federation-approve` from flags: the revision read for it, the exact grant shown and
confirmed on a terminal (`--yes` skips), refused input changing nothing. Two real clusters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.cli import Terminal, ok, refused
from tests.support.cluster import RunningCluster, ficc
from tests.support.federation import configured_pair, offer_in, overview, send_offer


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    root = tmp_path_factory.mktemp("cli-approve")
    for name in ("alpha", "beta"):
        assert ficc("init", state_dir=root / name).returncode == 0
    with configured_pair(root) as pair_:
        yield pair_


def test_a_grant_from_flags_is_shown_then_approved_on_confirmation(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    offer = send_offer(alpha.owner(), beta, ["discover", "resources:read"])
    terminal = Terminal(
        "federation-approve",
        offer["id"],
        "--scope",
        "discover",
        "--concurrent",
        "3",
        "--lifetime",
        "7200",
        state_dir=beta.state_dir,
    )
    try:
        # The whole grant with its defaults (1000 requests, 512 KiB requests) before the question.
        shown = terminal.read_until(lambda text: "Approve this offer" in text)
        assert "requests" in shown
        assert "1000" in shown
        assert "512.0 KiB" in shown
        assert "received" in shown
        terminal.type("n\n")
        assert terminal.wait() == 130
    finally:
        terminal.close()
    waiting = offer_in(overview(beta.owner()), offer["id"])
    assert waiting is not None
    assert waiting["state"] == "received"
    approved = ok(
        beta.state_dir,
        "federation-approve",
        offer["id"],
        "--scope",
        "discover",
        "--concurrent",
        "3",
        "--yes",
    )
    assert approved["state"] == "approved"
    grants = overview(beta.owner())["grants"]
    grant = next(g for g in grants if g["id"] == approved["receipt"]["grant"])
    assert grant["concurrent"] == 3
    assert grant["scopes"] == ["discover"]


def test_a_grant_beyond_the_offer_or_no_offer_changes_nothing(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    offer = send_offer(alpha.owner(), beta, ["discover"])
    error = refused(
        beta.state_dir,
        "federation-approve",
        offer["id"],
        "--scope",
        "models:read",
        "--yes",
        status=1,
    )
    assert error["code"] == "invalid_request"
    error = refused(
        beta.state_dir, "federation-approve", "ofr_" + "a" * 26, "--scope", "discover", status=2
    )
    assert "no offer" in error["message"]
    error = refused(beta.state_dir, "federation-approve", offer["id"], status=2)
    assert "--scope" in error["message"]
    waiting = offer_in(overview(beta.owner()), offer["id"])
    assert waiting is not None
    assert waiting["state"] == "received"
    assert waiting["revision"] == offer["revision"]
