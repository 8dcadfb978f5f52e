"""A third cluster that knows the service's HyperNet ID and ticket cannot use a pairing.

alpha and beta are real `ficc serve` clusters, paired over real HyperNet. The third cluster
is a HyperNet endpoint with its own keys in this process, speaking ficc.federation/1 to beta
directly: it can send its own offer, and nothing more.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.federation import (
    API,
    Pairing,
    configure,
    grant_in,
    identity,
    offer_in,
    ok,
    overview,
    pair,
    peer_in,
    refresh,
)

from ficc.adapters.hypernet import HyperNetEndpoint
from ficc.adapters.keys import ClusterKey
from ficc.base.errors import Conflict, FiccError, NotFound, PermissionDenied
from ficc.base.ids import new_id
from ficc.services.ports.peers import KnownPeer, PeerIdentity, RequestResult


@pytest.fixture(scope="module")
def paired(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCluster, RunningCluster, Pairing]]:
    root = tmp_path_factory.mktemp("third")
    alpha = start_cluster(root / "alpha")
    beta = start_cluster(root / "beta")
    try:
        configure(alpha, "alpha")
        configure(beta, "beta")
        yield alpha, beta, pair(alpha, beta, scopes=["discover"])
    finally:
        alpha.stop()
        beta.stop()


class ThirdCluster:
    """Its own HyperNet key and cluster key; it has paired with nobody."""

    def __init__(self, directory: Path) -> None:
        self.endpoint = HyperNetEndpoint(
            agent_directory=directory,
            cluster_key=ClusterKey.generate(),
            lookup=self.lookup,
            handler=self.handle,
            bind_address="127.0.0.1:0",
        )

    async def lookup(self, hypernet_id: str) -> tuple[KnownPeer, ...]:
        return ()

    async def handle(
        self, peer: PeerIdentity, operation: str, body: dict[str, Any], body_bytes: int
    ) -> RequestResult:
        raise NotFound("the third cluster serves nothing")


@pytest.fixture
async def third(tmp_path: Path) -> AsyncIterator[ThirdCluster]:
    cluster = ThirdCluster(tmp_path / "third-agent")
    await cluster.endpoint.start()
    yield cluster
    await cluster.endpoint.stop()


async def refused(
    third: ThirdCluster, beta: RunningCluster, operation: str, body: dict[str, Any]
) -> FiccError:
    who = identity(beta)
    with pytest.raises(FiccError) as caught:
        await third.endpoint.request(
            who["hypernet_id"], operation, body, ticket=who["ticket"], timeout_seconds=10
        )
    return caught.value


async def test_a_third_cluster_with_the_services_id_and_ticket_cannot_use_the_pairing(
    paired: tuple[RunningCluster, RunningCluster, Pairing], third: ThirdCluster
) -> None:
    alpha, beta, pairing = paired
    before = overview(beta.owner())

    error = await refused(third, beta, "grants.list", {})
    assert isinstance(error, PermissionDenied)
    assert error.details.get("reason") == "not_paired"
    for operation, body in [
        ("peer.removed", {}),
        ("grant.revoked", {"grant": pairing.grant}),
    ]:
        assert isinstance(await refused(third, beta, operation, body), PermissionDenied)
    for operation, body in [
        ("pairing.fetch", {"offer": pairing.offer}),
        ("pairing.finish", {"offer": pairing.offer, "receipt": pairing.digest}),
        ("pairing.discard", {"offer": pairing.offer}),
        ("pairing.receipt", {"offer": pairing.offer, "receipt": {}}),
    ]:
        assert isinstance(await refused(third, beta, operation, body), NotFound), operation
    # Reusing the pairing's offer ID for an offer of its own is refused too.
    reused = {"offer": pairing.offer, "scopes": ["discover"], "label": "third"}
    assert isinstance(await refused(third, beta, "pairing.offer", reused), Conflict)

    after = overview(beta.owner())
    assert after["peers"] == before["peers"]
    assert after["grants"] == before["grants"]
    assert (peer_in(after, pairing.service_peer) or {}).get("state") == "paired"
    assert (grant_in(after, pairing.grant) or {}).get("state") == "active"
    listed = ok(refresh(alpha.owner(), pairing.requester_peer))
    assert [item["id"] for item in listed["remote_grants"]] == [pairing.grant]
    assert listed["remote_grants"][0]["state"] == "active"


async def test_a_third_clusters_own_offer_is_separate_from_the_pairing(
    paired: tuple[RunningCluster, RunningCluster, Pairing], third: ThirdCluster
) -> None:
    alpha, beta, pairing = paired
    who = identity(beta)
    own = new_id("offer", secrets.token_bytes(16))
    answer = await third.endpoint.request(
        who["hypernet_id"],
        "pairing.offer",
        {"offer": own, "scopes": ["discover"], "label": "third"},
        ticket=who["ticket"],
        timeout_seconds=10,
    )
    assert answer.body["offer"] == own
    view = overview(beta.owner())
    incoming = offer_in(view, own)
    assert incoming is not None
    assert incoming["state"] == "received"
    assert incoming["requester"] == third.endpoint.hypernet_id
    assert incoming["requester"] != identity(alpha)["hypernet_id"]
    assert incoming["peer"] is None
    original = offer_in(view, pairing.offer)
    assert original is not None
    assert original["state"] == "finished"
    assert original["requester"] == identity(alpha)["hypernet_id"]
    # The third cluster still cannot list the pairing's grants after offering.
    assert isinstance(await refused(third, beta, "grants.list", {}), PermissionDenied)
    ok(beta.owner().delete(f"{API}/offers/{own}"))
