"""Two in-process clusters joined by an in-memory channel in place of HyperNet.

Each request is served by the other cluster's operation table with the identity a session
would prove (its cluster key, and the generation of the pairing the request goes under, which
the server must have recorded, as a handshake checks); answers cross as JSON. A test can lose
the answer of an operation once, after the other side served it: the requester then sees
``OutcomeUnknown`` as it would after a timeout.

The clusters are wired by ``bootstrap.build`` with the channel as their transport, over the
fake unit of work.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fakes.clock import FakeClock
from tests.support.fakes.cluster import fake_cluster

from ficc.adapters.keys import ClusterKey
from ficc.base.canonical import canonical_json
from ficc.base.errors import FiccError, OutcomeUnknown, PeerUnreachable, ProtocolError
from ficc.bootstrap import Cluster, Federation, lifecycle
from ficc.domain import peers as p
from ficc.domain.principals import Principal, owner_principal
from ficc.domain.scopes import REMOTE_SCOPES
from ficc.services.ports.peers import (
    Answer,
    EncodedAnswer,
    PeerIdentity,
    Transport,
    TransportFactory,
)


class FakeTransport:
    """The endpoint of one cluster: it reaches the other clusters of its pair."""

    def __init__(self, hypernet_id: str, cluster_key: ClusterKey) -> None:
        self.hypernet_id = hypernet_id
        self.cluster_key = cluster_key
        self._federation: Federation | None = None
        self.addresses: list[str] = []
        self.ticket = f"ticket-{hypernet_id[:8]}"
        self.others: dict[str, FakeTransport] = {}
        self.lose_answer_of: set[str] = set()
        """Operations whose next answer is lost once the other side has served it."""
        self.lost: dict[str, dict[str, Any]] = {}
        """The answers lost, by operation: what the other side said the first time."""
        self.sent: list[str] = []
        self.answered: dict[str, dict[str, Any]] = {}
        """The last JSON answer of each operation this end sent, as it crossed."""

    def serving(self, federation: Federation) -> TransportFactory:
        """The companion's transport factory: this end, serving ``federation``."""
        self._federation = federation

        def make(_agent_directory: Path, _bind_address: str) -> Transport:
            return self

        return make

    @property
    def federation(self) -> Federation:
        if self._federation is None:
            raise RuntimeError("this end serves no cluster yet")
        return self._federation

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
        self.answered[operation] = crossed
        if operation in self.lose_answer_of:
            self.lose_answer_of.discard(operation)
            self.lost[operation] = crossed
            raise OutcomeUnknown(f"the outcome of {operation} is unknown: the answer was lost")
        server = self.others[peer].cluster_key.public_key
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
        async with contextlib.aclosing(answer):
            yield answer

    async def _served(
        self, peer: str, generation: int, operation: str, body: Mapping[str, Any]
    ) -> Any:
        server = self.others.get(peer)
        if server is None:
            raise PeerUnreachable(f"no cluster {peer} on this channel")
        self.sent.append(operation)
        known = await server.federation.known.lookup(self.hypernet_id)
        if generation and generation not in {pairing.generation for pairing in known}:
            raise ProtocolError(f"pairing generation mismatch: the peer is at {generation}")
        identity = PeerIdentity(self.hypernet_id, self.cluster_key.public_key, generation)
        wire = json.loads(json.dumps(dict(body)))
        answer = await server.federation.operations.serve(
            identity, operation, wire, len(canonical_json(wire))
        )
        if isinstance(answer, EncodedAnswer):
            return json.loads(answer.content)
        return answer


def channel(count: int) -> list[FakeTransport]:
    """``count`` ends of one shared in-memory channel, each with a cluster key of its own."""
    ends = [FakeTransport(f"{index + 1:x}" * 64, ClusterKey.generate()) for index in range(count)]
    for end in ends:
        end.others = {other.hypernet_id: other for other in ends if other is not end}
    return ends


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
async def open_pair(root: Path, *, clock: FakeClock | None = None) -> AsyncIterator[Pair]:
    """A requester and a grantor over fakes, with running companions on one channel."""
    clock = clock or FakeClock()
    ends = channel(2)
    clusters: list[Cluster] = []
    for name, end in zip(("requester", "grantor"), ends, strict=True):
        cluster = await fake_cluster(
            root / name, clock=clock, cluster_key=end.cluster_key, transport_factory=end.serving
        )
        await cluster.companion.configure(OWNER, str(root / name / "agent"), None)
        clusters.append(cluster)
    requester, grantor = clusters
    try:
        yield Pair(requester, grantor, ends[0], clock)
    finally:
        await lifecycle.close(requester)
        await lifecycle.close(grantor)


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
        OWNER, project, offer.id, revision=1, grant=grant
    )
    assert approved.receipt_delivered is True
    receipt = approved.offer.receipt
    assert receipt is not None
    return offer.id, str(receipt["digest"])


async def paired(
    pair: Pair,
    grant: dict[str, Any],
    *,
    requester_project: str = "default",
    project: str = "default",
) -> p.PairingView:
    """Pair the requester's ``requester_project`` with the grantor's ``project`` under
    ``grant``: the finish answer (offer and requester's peer)."""
    offer_id, digest = await approved_offer(
        pair, grant, requester_project=requester_project, project=project
    )
    return await pair.requester.federation.pairing.finish_offer(
        OWNER, requester_project, offer_id, receipt=digest
    )
