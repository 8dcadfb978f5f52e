"""Removing, forgetting and pairing again, between real clusters over real HyperNet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import (
    API,
    DISCOVER_GRANT,
    Pairing,
    approve,
    configure,
    configured_pair,
    error_of,
    finish,
    grant_in,
    offer_in,
    ok,
    overview,
    pair,
    peer_in,
    refresh,
    send_offer,
    wait_for,
)

from ficc.bootstrap import CONNECT_SECONDS_VARIABLE

REMOVAL_DEADLINE_SECONDS = 15.0
CONNECT_SECONDS = 2.0
"""The clusters' deadline for reaching a peer (5 s by default): loopback connects take
milliseconds, and a peer that is down is given up on after it."""


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCluster, RunningCluster]]:
    """alpha asks for access; beta is the service's cluster."""
    root = tmp_path_factory.mktemp("peers")
    with configured_pair(root, **{CONNECT_SECONDS_VARIABLE: str(CONNECT_SECONDS)}) as pair_:
        yield pair_


def remove_on_both_sides(alpha: RunningCluster, beta: RunningCluster, pairing: Pairing) -> None:
    removed = ok(beta.owner().delete(f"{API}/peers/{pairing.service_peer}"))
    assert removed["told"] is True
    wait_for(
        lambda: (
            (peer_in(overview(alpha.owner()), pairing.requester_peer) or {}).get("state")
            == "removed"
        ),
        what="the requester sees the removal",
    )


def test_forget_is_refused_naming_the_grants_until_every_grant_is_retired(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    b = beta.owner()
    pairing = pair(alpha, beta)
    further = ok(b.post(f"{API}/peers/{pairing.service_peer}/grants", json=DISCOVER_GRANT), 201)
    both = sorted([pairing.grant, further["id"]])

    refused = error_of(b.post(f"{API}/peers/{pairing.service_peer}/forget"), 409)
    assert "remove it first" in refused["message"]
    remove_on_both_sides(alpha, beta, pairing)

    refused = error_of(b.post(f"{API}/peers/{pairing.service_peer}/forget"), 409)
    assert all(grant in refused["message"] for grant in both)
    assert sorted(refused["details"]["grants"]) == both
    ok(b.post(f"{API}/grants/{pairing.grant}/retire"))
    refused = error_of(b.post(f"{API}/peers/{pairing.service_peer}/forget"), 409)
    assert further["id"] in refused["message"]
    assert pairing.grant not in refused["message"]
    view = overview(b)
    assert (peer_in(view, pairing.service_peer) or {}).get("state") == "removed"
    assert (grant_in(view, further["id"]) or {}).get("state") == "revoked"

    ok(b.post(f"{API}/grants/{further['id']}/retire"))
    forgotten = ok(b.post(f"{API}/peers/{pairing.service_peer}/forget"))
    assert forgotten == {"peer": pairing.service_peer, "forgotten": True}
    view = overview(b)
    assert peer_in(view, pairing.service_peer) is None
    assert all(grant_in(view, grant) is None for grant in both)
    error_of(b.post(f"{API}/peers/{pairing.service_peer}/forget"), 404)
    ok(alpha.owner().post(f"{API}/peers/{pairing.requester_peer}/forget"))


def test_pairing_again_after_forget_gets_new_ids_and_generation_and_the_old_grant_stays_dead(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    a, b = alpha.owner(), beta.owner()
    old = pair(alpha, beta)
    remove_on_both_sides(alpha, beta, old)
    ok(b.post(f"{API}/grants/{old.grant}/retire"))
    ok(b.post(f"{API}/peers/{old.service_peer}/forget"))
    # The requester keeps its removed peer: pairing again does not need it forgotten.

    new = pair(alpha, beta)
    assert new.offer != old.offer
    assert new.requester_peer != old.requester_peer
    assert new.service_peer != old.service_peer
    assert new.grant != old.grant
    assert new.generation != old.generation

    listed = ok(refresh(a, new.requester_peer))
    assert [item["id"] for item in listed["remote_grants"]] == [new.grant]
    assert listed["selected"] == new.grant
    error_of(refresh(a, new.requester_peer, grant=old.grant), 404)
    error_of(refresh(a, old.requester_peer), 409)
    view_b = overview(b)
    assert grant_in(view_b, old.grant) is None
    assert [grant["id"] for grant in view_b["grants"]] == [new.grant]
    error_of(b.delete(f"{API}/grants/{old.grant}"), 404)
    error_of(b.post(f"{API}/grants/{old.grant}/retire"), 404)
    old_peer = peer_in(overview(a), old.requester_peer)
    assert old_peer is not None
    assert old_peer["state"] == "removed"
    assert all(item["state"] == "revoked" for item in old_peer["remote_grants"])

    # Clean up for the next test: nothing of either pairing stays.
    remove_on_both_sides(alpha, beta, new)
    ok(b.post(f"{API}/grants/{new.grant}/retire"))
    ok(b.post(f"{API}/peers/{new.service_peer}/forget"))
    for peer in (old.requester_peer, new.requester_peer):
        ok(a.post(f"{API}/peers/{peer}/forget"))


def test_a_second_pairing_with_a_paired_cluster_is_refused_and_the_first_keeps_working(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    a, b = alpha.owner(), beta.owner()
    first = pair(alpha, beta)
    offer = send_offer(a, beta, ["discover"])
    error = error_of(approve(b, offer["id"], DISCOVER_GRANT), 409)
    assert first.service_peer in error["message"]
    incoming = offer_in(overview(b), offer["id"])
    assert incoming is not None
    assert (incoming["state"], incoming["revision"]) == ("received", 1)
    ok(b.delete(f"{API}/offers/{offer['id']}"))
    listed = ok(refresh(a, first.requester_peer))
    assert [item["id"] for item in listed["remote_grants"]] == [first.grant]

    remove_on_both_sides(alpha, beta, first)
    ok(b.post(f"{API}/grants/{first.grant}/retire"))
    ok(b.post(f"{API}/peers/{first.service_peer}/forget"))
    ok(a.post(f"{API}/peers/{first.requester_peer}/forget"))


def _discover(client: httpx.Client, peer: str) -> httpx.Response:
    return client.post(f"{API}/peers/{peer}/request", json={"operation": "discover", "body": {}})


def test_two_projects_pair_with_one_cluster_over_sessions_of_their_own(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    """alpha's default and red projects each pair with beta (default and blue): each pairing
    has its own generation and HyperNet sessions; ending one leaves the other serving."""
    alpha, beta = clusters
    a, b = alpha.owner(), beta.owner()
    ok(a.post("/api/v1/projects", json={"name": "red"}), 201)
    ok(b.post("/api/v1/projects", json={"name": "blue"}), 201)
    red = alpha.client(alpha.owner_token, **{"X-FICC-Project": "red"})
    blue = beta.client(beta.owner_token, **{"X-FICC-Project": "blue"})
    first = pair(alpha, beta)
    offer = send_offer(red, beta, ["discover"])
    approved = ok(approve(blue, offer["id"], DISCOVER_GRANT))
    second = ok(finish(red, offer["id"], approved["receipt"]["digest"]))["peer"]
    assert second["generation"] != first.generation
    assert (
        ok(_discover(a, first.requester_peer))["result"]
        == ok(_discover(red, second["id"]))["result"]
    )
    [blue_peer] = overview(blue)["peers"]
    assert (blue_peer["state"], blue_peer["generation"]) == ("paired", second["generation"])

    assert ok(blue.delete(f"{API}/peers/{blue_peer['id']}"))["told"] is True
    wait_for(
        lambda: (peer_in(overview(red), second["id"]) or {}).get("state") == "removed",
        what="alpha's red project sees its pairing removed",
    )
    assert error_of(_discover(red, second["id"]), 409)["code"] == "conflict"
    assert ok(_discover(a, first.requester_peer))["replayed"] is False
    assert (peer_in(overview(a), first.requester_peer) or {})["state"] == "paired"

    remove_on_both_sides(alpha, beta, first)
    ok(b.post(f"{API}/grants/{first.grant}/retire"))
    ok(blue.post(f"{API}/grants/{approved['receipt']['grant']}/retire"))
    ok(b.post(f"{API}/peers/{first.service_peer}/forget"))
    ok(blue.post(f"{API}/peers/{blue_peer['id']}/forget"))
    ok(a.post(f"{API}/peers/{first.requester_peer}/forget"))
    ok(red.post(f"{API}/peers/{second['id']}/forget"))


def test_of_two_approved_offers_from_one_cluster_only_the_first_finished_pairs(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, beta = clusters
    a, b = alpha.owner(), beta.owner()
    offers = [send_offer(a, beta, ["discover"])["id"] for _ in range(2)]
    digests = [ok(approve(b, offer, DISCOVER_GRANT))["receipt"]["digest"] for offer in offers]
    finished = ok(finish(a, offers[0], digests[0]))
    error = error_of(finish(a, offers[1], digests[1]), 409)
    assert error["code"] == "conflict"
    listed = ok(refresh(a, finished["peer"]["id"]))
    assert len(listed["remote_grants"]) == 1
    paired = [peer for peer in overview(b)["peers"] if peer["state"] == "paired"]
    assert len(paired) == 1
    service_peer = paired[0]["id"]
    # An approved offer is not discarded (its requester may have finished, the answer lost):
    # its pending peer is removed instead, which revokes the grant.
    before = overview(b)
    refused = error_of(b.delete(f"{API}/offers/{offers[1]}"), 409)
    shown = {key: value for key, value in refused["details"].items() if key != "request_id"}
    assert shown == {"state": "approved", "event": "discard"}
    assert overview(b) == before
    approved = offer_in(before, offers[1])
    assert approved is not None
    ok(b.delete(f"{API}/peers/{approved['peer']}"))
    view = overview(b)
    pending_peer = peer_in(view, approved["peer"])
    assert pending_peer is not None
    assert pending_peer["state"] == "removed"
    unfinished = [grant for grant in view["grants"] if grant["peer"] == approved["peer"]]
    assert [grant["state"] for grant in unfinished] == ["revoked"]

    removed = ok(b.delete(f"{API}/peers/{service_peer}"))
    assert removed["told"] is True
    for grant in overview(b)["grants"]:
        if grant["state"] != "retired":
            ok(b.post(f"{API}/grants/{grant['id']}/retire"))
    for peer in overview(b)["peers"]:
        ok(b.post(f"{API}/peers/{peer['id']}/forget"))


def test_removing_a_peer_that_is_down_completes_locally_and_says_it_was_not_told(
    clusters: tuple[RunningCluster, RunningCluster], tmp_path: Path
) -> None:
    _, beta = clusters
    b = beta.owner()
    delta = start_cluster(tmp_path / "delta")
    try:
        configure(delta, "delta")
        pairing = pair(delta, beta)
        further = ok(b.post(f"{API}/peers/{pairing.service_peer}/grants", json=DISCOVER_GRANT), 201)
        delta.stop()

        started = time.monotonic()
        removed = ok(b.delete(f"{API}/peers/{pairing.service_peer}"))
        assert time.monotonic() - started < REMOVAL_DEADLINE_SECONDS
        assert removed["told"] is False
        assert removed["peer"]["state"] == "removed"
        view = overview(b)
        assert (peer_in(view, pairing.service_peer) or {}).get("state") == "removed"
        for grant in (pairing.grant, further["id"]):
            assert (grant_in(view, grant) or {}).get("state") == "revoked"

        # Back up, the requester still believes in the pairing, but it is refused.
        delta = start_cluster(delta.state_dir)
        wait_for(
            lambda: overview(delta.owner())["companion"]["state"] == "running",
            what="the companion restarts",
        )
        d = delta.owner()
        assert (peer_in(overview(d), pairing.requester_peer) or {}).get("state") == "paired"
        refused = refresh(d, pairing.requester_peer)
        assert refused.status_code in (403, 409, 502), refused.text
        # Removing it locally too lets it pair again.
        local = ok(d.delete(f"{API}/peers/{pairing.requester_peer}"))
        assert local["peer"]["state"] == "removed"
        again = pair(delta, beta)
        assert again.generation != pairing.generation
        listed = ok(refresh(d, again.requester_peer))
        assert [item["id"] for item in listed["remote_grants"]] == [again.grant]
    finally:
        delta.stop()


def test_a_refusal_on_a_peers_route_uses_the_contracts_error_envelope(
    clusters: tuple[RunningCluster, RunningCluster],
) -> None:
    alpha, _ = clusters
    error = error_of(alpha.owner().post(f"{API}/peers/per_{'a' * 26}/forget"), 404)
    assert error["code"] == "not_found"
    assert "details" in error
