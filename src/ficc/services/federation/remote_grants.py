"""The requester's copies of the grants its peers give it.

A copy goes stale whenever something may have changed it: a request through the grant uses
its allowance, a mutation may create records it publishes. The next read of a stale copy asks
the peer (``grants.list``) first; a peer that cannot be reached leaves the copy as it was,
still marked stale. A copy read after its expiry shows ``expired`` whatever it last said.
"""

from __future__ import annotations

from ficc.base.errors import Conflict, FiccError
from ficc.base.json_types import JSONObject
from ficc.domain.peers import Peer, PeerState
from ficc.domain.remote_grants import RemoteGrant
from ficc.services.federation.common import (
    GRANTS_LIST_ANSWER_BYTES,
    NOTICE_TIMEOUT_SECONDS,
    PAIRING_TIMEOUT_SECONDS,
    FederationContext,
    log,
)


class RemoteGrantCopies:
    """Reads and refreshes of the remote grants' copies, knowing which ones are stale."""

    def __init__(self, context: FederationContext) -> None:
        self._ctx = context
        self._stale: set[str] = set()

    def changed(self, peer_id: str) -> None:
        """Something went through a grant of this peer: ask it before the next read."""
        self._stale.add(peer_id)

    async def fetch(
        self, peer: Peer, *, timeout_seconds: float = PAIRING_TIMEOUT_SECONDS
    ) -> list[JSONObject]:
        """Ask the peer for the grants it gives us now, and keep that copy."""
        answer = await self._ctx.link.request(
            peer.hypernet_id,
            "grants.list",
            {},
            generation=peer.generation,
            ticket=peer.ticket,
            timeout_seconds=timeout_seconds,
            max_answer_bytes=GRANTS_LIST_ANSWER_BYTES,
        )
        listed = answer.body.get("grants")
        if not isinstance(listed, list) or not all(isinstance(i, dict) for i in listed):
            raise Conflict("the peer answered grants.list with something else")
        async with self._ctx.uow_factory() as uow:
            now_listed = {item.get("id") for item in listed}
            for item in await uow.remote_grants.of_peer(peer.id):
                grant_id = item.get("id")
                if grant_id not in now_listed and isinstance(grant_id, str):
                    # A grant the peer lists no more (retired): remember it gave it, so the
                    # grant's chain of usage receipts can still be reconciled.
                    await uow.receipt_chains.note(grant_id, peer.id, None)
            await uow.remote_grants.replace_for_peer(peer.id, listed, self._ctx.clock())
            await uow.commit()
        self._stale.discard(peer.id)
        return listed

    async def current(self, peer: Peer, kept: list[JSONObject]) -> list[RemoteGrant]:
        """The copy to show: asked for again when stale (best effort), expiry applied."""
        if peer.id in self._stale and peer.state == PeerState.PAIRED:
            try:
                kept = await self.fetch(peer, timeout_seconds=NOTICE_TIMEOUT_SECONDS)
            except FiccError as exc:
                log.info("kept the stale grants of peer %s: %s", peer.id, exc.message)
        now = self._ctx.clock()
        return [RemoteGrant.as_of(item, now) for item in kept]
