"""`ficc federation-approve` from flags: the revision read for it, the exact grant shown and
confirmed on a terminal (`--yes` skips), refused input changing nothing. Two real clusters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

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


def test_token_limits_from_flags_are_in_the_grant_its_receipt_and_federation_grant(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    """--tokens, --tokens-per-minute and --requests-per-minute on federation-approve and
    federation-grant; out of bounds, the contract's refusal naming the field; then the
    grant's (empty) usage through federation-usage in each format."""
    alpha, beta = clusters
    offer = send_offer(alpha.owner(), beta, ["discover"])
    approved = ok(
        beta.state_dir,
        "federation-approve",
        offer["id"],
        "--scope",
        "discover",
        "--tokens",
        "20000",
        "--tokens-per-minute",
        "5000",
        "--yes",
    )
    terms = approved["receipt"]["body"]["grant_terms"]
    assert (terms["tokens"], terms["tokens_per_minute"]) == (20000, 5000)
    assert "requests_per_minute" not in terms
    grant_id = approved["receipt"]["grant"]
    shown = next(g for g in overview(beta.owner())["grants"] if g["id"] == grant_id)
    assert (shown["tokens"], shown["requests_per_minute"]) == (20000, None)
    assert shown["remaining"]["tokens"] == 20000
    peer = approved["peer"]
    finished = ok(
        alpha.state_dir,
        "federation-finish",
        offer["id"],
        "--receipt",
        approved["receipt"]["digest"],
    )
    body = tmp_path / "grant.json"
    body.write_text(json.dumps({"scopes": ["discover"]}))
    error = refused(
        beta.state_dir,
        "federation-grant",
        peer,
        "--input",
        str(body),
        "--requests-per-minute",
        "1000001",
        status=1,
    )
    assert error["code"] == "invalid_request"
    assert error["details"]["field"] == "grant.requests_per_minute"
    given = ok(
        beta.state_dir,
        "federation-grant",
        peer,
        "--input",
        str(body),
        "--requests-per-minute",
        "60",
    )
    assert given["requests_per_minute"] == 60
    usage = ok(beta.state_dir, "federation-usage", grant_id, "--format", "json")
    assert (usage["side"], usage["records"], usage["totals"]["requests"]) == ("grantor", [], 0)
    csv = ficc("federation-usage", grant_id, "--format", "csv", state_dir=beta.state_dir)
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout.splitlines() == [
        "request,operation,service,started_at,ended_at,prompt_tokens,completion_tokens,"
        "request_bytes,response_bytes,outcome"
    ]
    error = refused(beta.state_dir, "federation-usage", grant_id, "--since", "soon", status=1)
    assert error["details"]["field"] == "since"
    with_receipts = ficc(
        "federation-usage", grant_id, "--format", "csv", "--receipts", state_dir=beta.state_dir
    )
    assert with_receipts.stdout.splitlines()[0].endswith(",outcome,receipt")
    exported = ok(beta.state_dir, "federation-usage", grant_id, "--format", "json", "--receipts")
    assert exported["records"] == []
    requester_peer = finished["peer"]["id"]
    report = ok(alpha.state_dir, "federation-reconcile", requester_peer, "--grant", grant_id)
    assert report == {
        "grants": [
            {
                "grant": grant_id,
                "head": {"seq": 0, "digest": "0" * 64},
                "matched": True,
                "fetched": 0,
                "missing": [],
                "invalid": [],
            }
        ]
    }
    error = refused(
        alpha.state_dir, "federation-reconcile", requester_peer, "--grant", "x", status=1
    )
    assert error["details"]["field"] == "grant"
