"""The requester's gaps in grants' chains of usage receipts: kept so a restart still knows
which seqs to fetch with ``usage.receipts``, and fetched when nothing may still fill them.

A gap (an answer that ended without its receipt, a receipt past a seq never seen) is noted in
the transaction of the usage record that showed it, and held in memory as well: the check
before each request through a grant reads memory alone. A fetch that brings the chain up to
date forgets the grant's gaps; :meth:`ReceiptGaps.load` reads them back when the cluster starts.

Concurrent answers through one grant end at the grantor in one order and arrive in another: a
receipt past the head is kept and the grant marked behind, and the late one fills its place,
linked to both neighbours then, so reordering alone costs no fetch and marks nothing failing.
While other requests through the grant are still on their way the missing receipts are most
likely theirs: the fetch waits for a quiet moment (or for the gap to be
:data:`GAP_PATIENCE_SECONDS` old), and one fetch a grant runs at a time, so eight clients on
one grant never wait, each, for the receipts another one is bringing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Final

from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.services.federation.common import log
from ficc.services.ports import UnitOfWork

GAP_PATIENCE_SECONDS: Final = 30.0
"""How long a gap may wait for the answers still on their way before the next request fetches
it anyway."""
MAX_FILLED_SPAN: Final = 256
"""How far below the head a late receipt is looked for as the gap's last missing one."""


class ReceiptGaps:
    """Each grant known to lack receipts, the seq after which to fetch them, since when, and
    which are being fetched."""

    def __init__(self) -> None:
        self._behind: dict[str, int] = {}
        self._noticed: dict[str, float] = {}
        self._fetching: set[str] = set()

    async def load(self, uow: UnitOfWork) -> None:
        """At start: the gaps an earlier process noted and never fetched (due at once)."""
        self._behind = await uow.receipt_chains.behind()
        self._noticed = {}

    def after(self, grant_id: str) -> int | None:
        """The seq after which ``grant_id`` lacks receipts (None: none known lacking)."""
        return self._behind.get(grant_id)

    async def note(self, uow: UnitOfWork, peer_id: str, grant_id: str, after: int) -> None:
        """``grant_id`` lacks receipts past ``after``, in ``uow``'s transaction (nothing is
        written when a lower gap is noted already)."""
        known = self._behind.get(grant_id)
        if known is not None and known <= after:
            return
        if known is None:
            self._noticed[grant_id] = asyncio.get_running_loop().time()
        self._behind[grant_id] = after
        await uow.receipt_chains.note(grant_id, peer_id, after)

    async def caught_up(self, uow: UnitOfWork, grant_id: str) -> None:
        """The grant's chain was fetched from its first gap on, or its gap filled by the
        answers that were late: forget its gaps."""
        self._behind.pop(grant_id, None)
        self._noticed.pop(grant_id, None)
        await uow.receipt_chains.caught_up(grant_id)

    def due(self, grant_id: str, *, busy: bool) -> int | None:
        """The seq to fetch ``grant_id``'s receipts after, if they are to be fetched now;
        ``busy``: other requests through the grant are on their way and may bring them."""
        after = self._behind.get(grant_id)
        if after is None or grant_id in self._fetching:
            return None
        noticed = self._noticed.get(grant_id)
        waited = None if noticed is None else asyncio.get_running_loop().time() - noticed
        if busy and waited is not None and waited < GAP_PATIENCE_SECONDS:
            return None
        return after

    @contextlib.contextmanager
    def fetching(self, grant_id: str) -> Iterator[None]:
        self._fetching.add(grant_id)
        try:
            yield
        finally:
            self._fetching.discard(grant_id)

    async def filled(self, uow: UnitOfWork, grant_id: str, head: int) -> None:
        """The grant is no longer behind once every seq from where its gap began to the head
        is kept."""
        start = self._behind.get(grant_id)
        if start is None or head - start > MAX_FILLED_SPAN:
            return
        kept = await uow.usage_receipts.page(grant_id, m.REQUESTER, after=start, limit=head - start)
        if [item.seq for item in kept] == list(range(start + 1, head + 1)):
            await self.caught_up(uow, grant_id)


async def late_problem(
    uow: UnitOfWork, grant: str, seq: int, body: Mapping[str, object], receipt: object
) -> str | None:
    """Why a receipt below the head does not fit the place it arrived late for (None: it
    fits): it must follow the one kept before it, and the one kept after it, unchecked against
    it until now, must follow it. A seq kept already is a second receipt there."""
    near = await uow.usage_receipts.page(grant, m.REQUESTER, after=max(seq - 2, 0), limit=3)
    by_seq = {item.seq: item for item in near}
    if seq in by_seq:
        return r.SEQ
    before = by_seq.get(seq - 1)
    problem = None
    if seq == 1:
        problem = r.follows(body, r.EMPTY_HEAD)
    elif before is not None:
        problem = r.follows(body, r.head_after(before.receipt))
    after = by_seq.get(seq + 1)
    if problem is None and after is not None and after.problem is None:
        assert isinstance(receipt, Mapping)
        later = r.follows(after.receipt["body"], r.head_after(receipt))
        if later is not None:
            log.warning("grant %s: receipt %d fails verification: %s", grant, seq + 1, later)
            await uow.usage_receipts.mark(grant, m.REQUESTER, seq + 1, later)
    return problem
