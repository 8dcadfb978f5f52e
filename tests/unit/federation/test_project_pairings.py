"""Each project pairs on its own: one cluster's projects pair independently with the same other
cluster, each pairing bound to its own project on both sides and to its own generation.

Two clusters in process over fakes, joined by the in-memory channel (which checks the
generation a request goes under as the handshake does); the real transport's part is in
tests/e2e/test_pairing_peers.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.fakes.peer_channel import OWNER, Pair, approved_offer, paired, peers_of
from tests.support.isolation import record_model

from ficc.base.errors import Conflict, NotFound, PermissionDenied, ProtocolError
from ficc.domain.peers import PeerState

RED, BLUE = "red", "blue"
"""A second project on the requester (red) and on the grantor (blue)."""


async def _projects(pair: Pair) -> None:
    await pair.requester.projects.create_project(OWNER, RED)
    await pair.grantor.projects.create_project(OWNER, BLUE)


async def _two_pairings(pair: Pair) -> dict[str, Any]:
    """default↔default and red↔blue, each granting discovery of a model of its own project."""
    await _projects(pair)
    models = {
        project: (await record_model(pair.grantor, project, [64], owned=True)).id
        for project in ("default", BLUE)
    }
    first = await paired(pair, {"scopes": ["discover"], "models": [models["default"]]})
    second = await paired(
        pair,
        {"scopes": ["discover"], "models": [models[BLUE]]},
        requester_project=RED,
        project=BLUE,
    )
    return {"models": models, "first": first.peer, "second": second.peer}


async def _discovered(pair: Pair, project: str, peer_id: str) -> list[str]:
    answer = await pair.requester.remote.request(
        OWNER, project, peer_id, operation="discover", body={}
    )
    return list(answer["result"]["models"])


async def test_two_projects_pair_with_one_cluster_each_bound_to_its_own_project(
    pair: Pair,
) -> None:
    made = await _two_pairings(pair)
    [mine_default] = await peers_of(pair.requester)
    [mine_red] = await peers_of(pair.requester, RED)
    [theirs_default] = await peers_of(pair.grantor)
    [theirs_blue] = await peers_of(pair.grantor, BLUE)
    assert {peer.state for peer in (mine_default, mine_red, theirs_default, theirs_blue)} == {
        PeerState.PAIRED
    }
    # One generation per pairing, the same on both sides.
    assert mine_default.generation == theirs_default.generation
    assert mine_red.generation == theirs_blue.generation
    assert mine_default.generation != mine_red.generation
    grantor_id = pair.grantor.companion.transport.hypernet_id
    known = await pair.requester.federation.known.lookup(grantor_id)
    assert {k.generation for k in known} == {mine_default.generation, mine_red.generation}
    # Each project reaches exactly what its own pairing was granted.
    assert await _discovered(pair, "default", made["first"].id) == [made["models"]["default"]]
    assert await _discovered(pair, RED, made["second"].id) == [made["models"][BLUE]]
    # A project sees only its own peer.
    with pytest.raises(NotFound):
        await _discovered(pair, "default", made["second"].id)


async def test_a_grant_of_one_pairing_is_not_served_under_the_other(pair: Pair) -> None:
    made = await _two_pairings(pair)
    grantor_id = pair.grantor.companion.transport.hypernet_id
    [mine_red] = await peers_of(pair.requester, RED)
    with pytest.raises(NotFound):
        await pair.channel.request(
            grantor_id,
            "discover",
            {"grant": made["first"].selected, "body": {}},
            generation=mine_red.generation,
        )
    # A generation neither side recorded is refused as the handshake refuses it.
    with pytest.raises(ProtocolError, match="generation mismatch"):
        await pair.channel.request(
            grantor_id,
            "discover",
            {"grant": made["first"].selected, "body": {}},
            generation=mine_red.generation + 2**60,
        )
    # Before any pairing (generation 0) no grant is served, paired cluster or not.
    with pytest.raises(PermissionDenied) as refused:
        await pair.channel.request(
            grantor_id, "discover", {"grant": made["first"].selected, "body": {}}
        )
    assert refused.value.details["reason"] == "not_paired"


async def test_a_project_pairs_once_with_a_cluster_on_either_side(pair: Pair) -> None:
    await _two_pairings(pair)
    [theirs_blue] = await peers_of(pair.grantor, BLUE)
    # The grantor's blue project is paired with this cluster already: a further offer (here
    # from a third project of the requester) is refused there, and nothing is recorded.
    await pair.requester.projects.create_project(OWNER, "green")
    with pytest.raises(Conflict) as refused:
        await approved_offer(
            pair, {"scopes": ["discover"]}, requester_project="green", project=BLUE
        )
    assert refused.value.details["peer"] == theirs_blue.id
    assert await peers_of(pair.grantor, BLUE) == [theirs_blue]
    # The requester's red project is paired with the grantor already: approved into another
    # project of the grantor, its finish is refused.
    await pair.grantor.projects.create_project(OWNER, "violet")
    offer_id, digest = await approved_offer(
        pair, {"scopes": ["discover"]}, requester_project=RED, project="violet"
    )
    with pytest.raises(Conflict):
        await pair.requester.federation.pairing.finish_offer(OWNER, RED, offer_id, receipt=digest)
    assert [peer.state for peer in await peers_of(pair.requester, RED)] == [PeerState.PAIRED]


async def test_removing_one_pairing_leaves_the_other_serving(pair: Pair) -> None:
    made = await _two_pairings(pair)
    [theirs_blue] = await peers_of(pair.grantor, BLUE)
    removed = await pair.grantor.federation.peers.remove_peer(OWNER, BLUE, theirs_blue.id)
    assert removed.told is True
    [mine_red] = await peers_of(pair.requester, RED)
    assert mine_red.state == PeerState.REMOVED
    grantor_id = pair.grantor.companion.transport.hypernet_id
    known = await pair.requester.federation.known.lookup(grantor_id)
    [mine_default] = await peers_of(pair.requester)
    assert [k.generation for k in known] == [mine_default.generation]
    assert await _discovered(pair, "default", made["first"].id) == [made["models"]["default"]]
    with pytest.raises(Conflict):
        await _discovered(pair, RED, made["second"].id)
