"""The requester's memory of grants' receipt chains beside its copies of the grants."""

from __future__ import annotations

from typing import Protocol


class ReceiptChainsRepository(Protocol):
    """Gaps noticed in a grant's chain of usage receipts, and which peer gave a grant."""

    async def note(self, grant_id: str, peer_id: str, after: int | None) -> None:
        """Remember that ``grant_id`` (given by ``peer_id``) lacks receipts past ``after``;
        ``after`` None: only that the peer gave it."""
        ...

    async def behind(self) -> dict[str, int]:
        """Each grant with a gap noticed, and the lowest seq after which to fetch."""
        ...

    async def caught_up(self, grant_id: str) -> None:
        """The grant's gaps were fetched: forget them (a row noted with ``after`` None,
        which peer gave the grant, stays)."""
        ...

    async def of_peer(self, peer_id: str) -> list[str]:
        """The grants of ``peer_id`` remembered here, sorted."""
        ...
