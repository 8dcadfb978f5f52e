"""Offers not approved within 7 days expire: two clusters in this process share a fake clock.

Both clusters are wired by the real composition root and talk over real HyperNet on
loopback; only their clock is fake, so seven days pass in an instant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ficc.base.errors import Conflict
from ficc.bootstrap import Cluster, Settings, lifecycle, open_cluster
from ficc.domain.principals import Principal, owner_principal
from ficc.domain.scopes import LOCAL_SCOPES

SEVEN_DAYS = timedelta(days=7)
DISCOVER = {"scopes": ["discover"]}


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


@dataclass
class InProcess:
    cluster: Cluster
    owner: Principal


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, tzinfo=UTC))


@pytest.fixture
async def clusters(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[InProcess, InProcess]]:
    started: list[Cluster] = []
    try:
        pair = []
        for name in ("requester", "service"):
            settings = Settings(state_dir=tmp_path / name, hypernet_bind="127.0.0.1:0")
            cluster = await open_cluster(settings, clock=clock)
            started.append(cluster)
            await lifecycle.start(cluster)
            owner = owner_principal("usr_owner", "owner", via="socket")
            assert owner.scopes == frozenset(LOCAL_SCOPES)
            await cluster.companion.configure(owner, str(tmp_path / f"{name}-agent"), name)
            pair.append(InProcess(cluster, owner))
        yield pair[0], pair[1]
    finally:
        for cluster in started:
            await lifecycle.close(cluster)


async def send(requester: InProcess, service: InProcess) -> str:
    transport = service.cluster.companion.transport
    offer = await requester.cluster.federation.pairing.create_offer(
        requester.owner,
        "default",
        service=transport.hypernet_id,
        scopes=["discover"],
        ticket=transport.ticket,
    )
    return offer.id


async def state_of(side: InProcess, offer_id: str) -> str:
    return (await side.cluster.federation.pairing.get_offer("default", offer_id)).state


async def test_using_a_fake_clock_an_offer_expires_seven_days_after_it_was_sent(
    clusters: tuple[InProcess, InProcess], clock: FakeClock
) -> None:
    requester, service = clusters
    offer_id = await send(requester, service)
    sent_at = clock.now
    offer = await service.cluster.federation.pairing.get_offer("default", offer_id)
    assert offer.expires_at == sent_at + SEVEN_DAYS

    clock.advance(SEVEN_DAYS - timedelta(seconds=1))
    assert await state_of(service, offer_id) == "received"
    assert await state_of(requester, offer_id) == "sent"

    clock.advance(timedelta(seconds=1))
    assert await state_of(service, offer_id) == "expired"
    assert await state_of(requester, offer_id) == "expired"
    overview = await service.cluster.federation.overview.overview("default")
    assert [(o.id, o.state) for o in overview.offers] == [(offer_id, "expired")]

    with pytest.raises(Conflict) as refused:
        await service.cluster.federation.approval.approve_offer(
            service.owner, "default", offer_id, revision=1, grant=DISCOVER
        )
    assert refused.value.details["state"] == "expired"
    with pytest.raises(Conflict):
        await service.cluster.federation.pairing.discard_offer(service.owner, "default", offer_id)
    overview = await service.cluster.federation.overview.overview("default")
    assert overview.peers == ()
    assert overview.grants == ()
    assert await state_of(service, offer_id) == "expired"


async def test_using_a_fake_clock_an_offer_approved_in_time_does_not_expire(
    clusters: tuple[InProcess, InProcess], clock: FakeClock
) -> None:
    requester, service = clusters
    offer_id = await send(requester, service)
    clock.advance(SEVEN_DAYS - timedelta(seconds=1))
    approved = await service.cluster.federation.approval.approve_offer(
        service.owner, "default", offer_id, revision=1, grant=DISCOVER
    )
    assert approved.receipt_delivered is True
    assert approved.offer.receipt is not None
    clock.advance(timedelta(days=1))
    assert await state_of(service, offer_id) == "approved"
    assert await state_of(requester, offer_id) == "accepted"
    finished = await requester.cluster.federation.pairing.finish_offer(
        requester.owner, "default", offer_id, receipt=approved.offer.receipt["digest"]
    )
    assert finished.peer.state == "paired"
    assert await state_of(service, offer_id) == "finished"
