"""Two in-process clusters joined by an in-memory channel in place of HyperNet.

Each request is served by the other cluster's operation table with the identity a session
would prove (its cluster key, and the generation of the pairing the request goes under, which
the server must have recorded, as a handshake checks); answers cross as JSON. A test can lose
the answer of an operation once, after the other side served it: the requester then sees
``OutcomeUnknown`` as it would after a timeout.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fakes.clock import FakeClock

from ficc.base.errors import FiccError, OutcomeUnknown, ProtocolError, Unavailable
from ficc.bootstrap import Cluster, Settings, open_cluster
from ficc.domain import peers as p
from ficc.domain.principals import Principal, owner_principal
from ficc.domain.scopes import REMOTE_SCOPES
from ficc.services.peer_channel import Answer, PeerIdentity


class FakeTransport:
    """The endpoint of one cluster: it reaches the other clusters of its pair."""

    def __init__(self, cluster: Cluster, hypernet_id: str) -> None:
        self.cluster = cluster
        self.hypernet_id = hypernet_id
        self.addresses: list[str] = []
        self.ticket = f"ticket-{hypernet_id[:8]}"
        self.others: dict[str, FakeTransport] = {}
        self.lose_answer_of: set[str] = set()
        """Operations whose next answer is lost once the other side has served it."""
        self.lost: dict[str, dict[str, Any]] = {}
        """The answers lost, by operation: what the other side said the first time."""
        self.sent: list[str] = []

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def disconnect(self, hypernet_id: str, generation: int, reason: FiccError) -> None:
        return None

    async def request(
        self,
        peer: str,
        operation: str,
        body: Mapping[str, Any],
        *,
        generation: int = 0,
        ticket: str | None = None,
        timeout_seconds: float | None = None,
        max_answer_bytes: int | None = None,
    ) -> Answer:
        answer = await self._served(peer, generation, operation, body)
        if not isinstance(answer, dict):
            raise AssertionError(f"{operation} answered a stream")
        crossed: dict[str, Any] = json.loads(json.dumps(answer))
        if operation in self.lose_answer_of:
            self.lose_answer_of.discard(operation)
            self.lost[operation] = crossed
            raise OutcomeUnknown(f"the outcome of {operation} is unknown: the answer was lost")
        server = self.others[peer].cluster.cluster_key.public_key
        return Answer(PeerIdentity(peer, server, generation), crossed)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        peer: str,
        operation: str,
        body: Mapping[str, Any],
        *,
        generation: int = 0,
        ticket: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        answer = await self._served(peer, generation, operation, body)
        if isinstance(answer, dict):
            raise AssertionError(f"{operation} answered JSON")
        async with contextlib.aclosing(answer):  # type: ignore[type-var]
            yield answer

    async def _served(
        self, peer: str, generation: int, operation: str, body: Mapping[str, Any]
    ) -> Any:
        server = self.others.get(peer)
        if server is None:
            raise Unavailable(f"no cluster {peer} on this channel")
        self.sent.append(operation)
        known = await server.cluster.federation.known.lookup(self.hypernet_id)
        if generation and generation not in {pairing.generation for pairing in known}:
            raise ProtocolError(f"pairing generation mismatch: the peer is at {generation}")
        identity = PeerIdentity(self.hypernet_id, self.cluster.cluster_key.public_key, generation)
        return await server.cluster.federation.operations.serve(
            identity, operation, json.loads(json.dumps(dict(body)))
        )


def join(*clusters: Cluster) -> list[FakeTransport]:
    """Give each cluster a running companion on one shared in-memory channel."""
    transports = [
        FakeTransport(cluster, f"{index + 1:x}" * 64) for index, cluster in enumerate(clusters)
    ]
    for transport in transports:
        transport.others = {t.hypernet_id: t for t in transports if t is not transport}
        transport.cluster.companion._transport = transport  # type: ignore[assignment]
    return transports


OWNER: Principal = owner_principal("usr_owner", "owner", via="socket")


@dataclass
class Pair:
    """A requester and a grantor in process, and the requester's end of their channel."""

    requester: Cluster
    grantor: Cluster
    channel: FakeTransport
    """The requester's end: where its answers can be lost."""
    clock: FakeClock
    """The clock of both clusters."""


@contextlib.asynccontextmanager
async def open_pair(root: Path) -> AsyncIterator[Pair]:
    clock = FakeClock()
    requester = await open_cluster(Settings(state_dir=root / "requester"), clock=clock)
    grantor = await open_cluster(Settings(state_dir=root / "grantor"), clock=clock)
    channel, _ = join(requester, grantor)
    try:
        yield Pair(requester, grantor, channel, clock)
    finally:
        await requester.close()
        await grantor.close()


async def peers_of(cluster: Cluster, project: str = "default") -> list[p.Peer]:
    async with cluster.uow_factory() as uow:
        return list(await uow.peers.in_project(project))


async def approved_offer(
    pair: Pair,
    grant: dict[str, Any],
    *,
    requester_project: str = "default",
    project: str = "default",
) -> tuple[str, str]:
    """An offer from the requester's ``requester_project``, approved by the grantor into its
    ``project``: the offer's ID and receipt digest."""
    grantor_id = pair.grantor.companion.transport.hypernet_id
    offer = await pair.requester.federation.pairing.create_offer(
        OWNER, requester_project, service=grantor_id, scopes=sorted(REMOTE_SCOPES), ticket=None
    )
    approved = await pair.grantor.federation.approval.approve_offer(
        OWNER, project, offer["id"], revision=1, grant=grant
    )
    assert approved["receipt_delivered"] is True
    return str(offer["id"]), str(approved["receipt"]["digest"])


async def paired(
    pair: Pair,
    grant: dict[str, Any],
    *,
    requester_project: str = "default",
    project: str = "default",
) -> dict[str, Any]:
    """Pair the requester's ``requester_project`` with the grantor's ``project`` under
    ``grant``: the finish answer (offer and requester's peer)."""
    offer_id, digest = await approved_offer(
        pair, grant, requester_project=requester_project, project=project
    )
    return await pair.requester.federation.pairing.finish_offer(
        OWNER, requester_project, offer_id, receipt=digest
    )
