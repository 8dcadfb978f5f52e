"""Selecting a remote grant asks the peer first, and only an active grant can be selected."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.support.fakes.peer_channel import OWNER, Pair, paired, peers_of

from ficc.base.errors import Conflict

DISCOVER = {"scopes": ["discover"]}


async def test_a_grant_given_since_the_last_refresh_is_selected_by_asking_the_peer(
    pair: Pair,
) -> None:
    finished = await paired(pair, DISCOVER)
    [service_peer] = await peers_of(pair.grantor)
    further = await pair.grantor.federation.grants.create_grant(
        OWNER, "default", service_peer.id, grant=DISCOVER
    )
    pair.channel.sent.clear()
    chosen = await pair.requester.federation.grants.refresh(
        OWNER, "default", finished.peer.id, grant=further.id
    )
    assert pair.channel.sent == ["grants.list"]
    assert chosen.selected == further.id
    assert {g.id for g in chosen.remote_grants} == {
        finished.peer.selected,
        further.id,
    }
    [requester_peer] = await peers_of(pair.requester)
    assert requester_peer.selected_grant == further.id


async def test_a_revoked_grant_cannot_be_selected_and_the_selection_stays(pair: Pair) -> None:
    finished = await paired(pair, DISCOVER)
    first = finished.peer.selected
    [service_peer] = await peers_of(pair.grantor)
    further = await pair.grantor.federation.grants.create_grant(
        OWNER, "default", service_peer.id, grant=DISCOVER
    )
    listed = await pair.requester.federation.grants.refresh(
        OWNER, "default", finished.peer.id, grant=None
    )
    assert {g.id: g.state for g in listed.remote_grants}[further.id] == "active"
    # Revoked while the grantor's companion is down: the requester is not told, and its copy
    # of the grants still says active.
    grantor_end = pair.grantor.companion._transport
    pair.grantor.companion._transport = None
    revoked = await pair.grantor.federation.grants.revoke_grant(OWNER, "default", further.id)
    assert revoked.told is False
    pair.grantor.companion._transport = grantor_end
    with pytest.raises(Conflict) as refused:
        await pair.requester.federation.grants.refresh(
            OWNER, "default", finished.peer.id, grant=further.id
        )
    assert refused.value.details == {"grant": further.id, "state": "revoked"}
    [requester_peer] = await peers_of(pair.requester)
    assert requester_peer.selected_grant == first


async def test_the_copy_of_a_grant_is_asked_for_again_when_read_after_a_request(
    pair: Pair,
) -> None:
    finished = await paired(pair, DISCOVER)
    peer_id = finished.peer.id
    first = finished.peer.selected
    for _ in range(3):
        await pair.requester.remote.request(
            OWNER, "default", peer_id, operation="discover", body={}
        )
    view = await pair.requester.federation.overview.overview("default")
    [shown] = [g for g in view.peers[0].remote_grants if g.id == first]
    assert shown.listed["remaining"] == {"requests": 1000 - 3, "transfer_bytes": 0, "tokens": None}
    # Read again with nothing changed since: the copy is not asked for again.
    pair.channel.sent.clear()
    await pair.requester.federation.overview.overview("default")
    assert pair.channel.sent == []


async def test_a_copy_read_after_its_expiry_shows_expired(pair: Pair) -> None:
    finished = await paired(pair, {"scopes": ["discover"], "lifetime": 60})
    assert [g.state for g in finished.peer.remote_grants] == ["active"]
    pair.clock.advance(timedelta(seconds=61))
    view = await pair.requester.federation.overview.overview("default")
    assert [g.state for g in view.peers[0].remote_grants] == ["expired"]
