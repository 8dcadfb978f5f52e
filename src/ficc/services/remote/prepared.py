"""A request to a peer checked and built by the client, not yet sent: what sending it and
recording its usage both read."""

from __future__ import annotations

from dataclasses import dataclass

from ficc.base.json_types import JSONObject
from ficc.domain.peers import Peer
from ficc.domain.principals import Principal


@dataclass(frozen=True)
class Prepared:
    """A request checked and built, not yet sent: the peer, the grant it goes under, this
    cluster's copy of that grant's terms, the operation and the wire body."""

    peer: Peer
    grant_id: str
    terms: JSONObject
    operation: str
    wire: JSONObject
    body_bytes: int
    """The wire body's operation body as RFC 8785 bytes (what ``request_bytes`` counts)."""
    principal: Principal | None = None
    """Who asks: a restricted token's budgets hold the request before it is sent."""
