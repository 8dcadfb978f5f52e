"""The requester's gaps in grants' chains of usage receipts, kept so a restart still knows
which seqs to fetch with ``usage.receipts``.

A gap (an answer that ended without its receipt, a receipt past a seq never seen) is noted in
the transaction of the usage record that showed it, and held in memory as well: the check
before each request through a grant reads memory alone. A fetch that brings the chain up to
date forgets the grant's gaps; :meth:`ReceiptGaps.load` reads them back when the cluster starts.
"""

from __future__ import annotations

from ficc.services.ports import UnitOfWork


class ReceiptGaps:
    """Each grant known to lack receipts, and the seq after which to fetch them."""

    def __init__(self) -> None:
        self._behind: dict[str, int] = {}

    async def load(self, uow: UnitOfWork) -> None:
        """At start: the gaps an earlier process noted and never fetched."""
        self._behind = await uow.receipt_chains.behind()

    def after(self, grant_id: str) -> int | None:
        """The seq after which ``grant_id`` lacks receipts (None: none known lacking)."""
        return self._behind.get(grant_id)

    async def note(self, uow: UnitOfWork, peer_id: str, grant_id: str, after: int) -> None:
        """``grant_id`` lacks receipts past ``after``, in ``uow``'s transaction (nothing is
        written when a lower gap is noted already)."""
        known = self._behind.get(grant_id)
        if known is not None and known <= after:
            return
        self._behind[grant_id] = after
        await uow.receipt_chains.note(grant_id, peer_id, after)

    async def caught_up(self, uow: UnitOfWork, grant_id: str) -> None:
        """The grant's chain was fetched from its first gap on: forget its gaps."""
        self._behind.pop(grant_id, None)
        await uow.receipt_chains.caught_up(grant_id)
