"""A grant ends at its ``expires_at`` by a timer, not on next use: the grantor marks it expired
and refuses requests under it with ``grant_expired``.

Two clusters over fakes on virtual time: the services' clock follows the loop's, so an hour
of lifetime passes in microseconds and the timer and the records agree to the second.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.fakes.loop_clock import LoopWallClock, run_virtual
from tests.support.fakes.peer_channel import OWNER, Pair, open_pair, paired
from tests.support.isolation import record_model

from ficc.base.errors import GrantExpired
from ficc.domain.grants import GrantState

LIFETIME = 3600


async def _discover(pair: Pair, peer_id: str) -> list[str]:
    answer = await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="discover", body={}
    )
    return list(answer["result"]["models"])


async def _grantor_state(pair: Pair) -> str:
    async with pair.grantor.uow_factory() as uow:
        [grant] = await uow.grants.in_project("default")
    return grant.state


def test_a_grant_is_served_until_its_lifetime_ends_then_expired_and_refused(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with open_pair(tmp_path, clock=LoopWallClock()) as pair:
            model = await record_model(pair.grantor, "default", [64], owned=True)
            finished = await paired(
                pair, {"scopes": ["discover"], "models": [model.id], "lifetime": LIFETIME}
            )
            peer_id = finished.peer.id
            await asyncio.sleep(LIFETIME - 1)
            assert await _discover(pair, peer_id) == [model.id]
            assert await _grantor_state(pair) == GrantState.ACTIVE
            await asyncio.sleep(1)
            assert await _grantor_state(pair) == GrantState.EXPIRED
            with pytest.raises(GrantExpired):
                await _discover(pair, peer_id)

    run_virtual(main())
