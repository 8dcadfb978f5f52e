"""One admitted request under a grant, and the handler shapes the operation table holds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from ficc.base.errors import NotFound, PermissionDenied
from ficc.base.json_types import JSONObject
from ficc.domain.grants import Grant
from ficc.domain.peers import Peer
from ficc.domain.receipts import b64
from ficc.services.grant_slots import Slot
from ficc.services.inference import Actor
from ficc.services.metering import TokenHold
from ficc.services.mutations import MutationKey
from ficc.services.ports.peers import EncodedAnswer, PeerIdentity, RequestResult
from ficc.services.remote.views import peer_answer


@dataclass(frozen=True)
class Call:
    """One admitted request: who, under which grant, what, and the slot it holds."""

    identity: PeerIdentity
    peer: Peer
    grant: Grant
    operation: str
    body: JSONObject
    mutation_id: str | None
    slot: Slot
    body_bytes: int = 0
    """The operation's body as it travelled (RFC 8785 bytes)."""
    hold: TokenHold | None = None
    """What the admission held of the grant's token budget for an invoke (its tab takes it)."""

    @property
    def actor(self) -> Actor:
        return Actor(
            name=f"peer:{self.peer.id}",
            grant_id=self.grant.id,
            peer_hypernet_id=self.identity.hypernet_id,
            peer_cluster_key=b64(self.identity.cluster_key),
        )

    @property
    def peer_key(self) -> tuple[str, str]:
        """The proven peer as the audit log records it: HyperNet ID and cluster key."""
        return self.identity.hypernet_id, b64(self.identity.cluster_key)

    def key(self) -> MutationKey:
        """The mutation's key: its receipt keeps the answer as the peer is shown it."""
        assert self.mutation_id is not None
        return MutationKey.grant(
            self.grant.id, self.mutation_id, self.operation, self.body, shown=peer_answer
        )

    def require(self, kind: str, resource_id: str, field: str) -> None:
        """Every resource ID named in the body must be in the grant (or created by it)."""
        if not self.grant.covers(kind, resource_id):
            raise PermissionDenied(
                f"{field} names {resource_id}, which the grant does not include",
                details={"field": field, "reason": "resource_not_granted"},
            )


Effect = Callable[[MutationKey], Awaitable[tuple[JSONObject, bool]]]
"""A checked mutation, ready to run exactly once: its result and whether it was a replay."""
Answer = Callable[[Call], Awaitable[Mapping[str, object] | EncodedAnswer]]
"""A read under a grant: its result (or its encoding, when a limit measured it)."""
Mutate = Callable[[Call], Awaitable[Effect]]
"""A mutation under a grant: checks the body, then gives the effect to run once."""
Stream = Callable[[Call], AsyncIterator[bytes]]
"""A streamed answer under a grant."""
PeerHandler = Callable[[PeerIdentity, JSONObject], Awaitable[RequestResult]]
"""An operation outside any grant (pairing, notices): the proven peer and the body."""


def no_grant(grant_id: str) -> NotFound:
    """The one answer for a grant that does not exist and for another peer's grant."""
    return NotFound("this peer holds no such grant", details={"grant": grant_id})
