"""Gaps in the requester's chain of a grant's usage receipts, and when to fetch them.

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
from typing import Any, Final

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
    """The grants whose chain lacks receipts here, since when, and which are being fetched."""

    def __init__(self) -> None:
        self.behind: dict[str, int] = {}
        """The seq after which each grant's chain lacks receipts."""
        self._noticed: dict[str, float] = {}
        self._fetching: set[str] = set()

    def mark(self, grant: str, after: int) -> None:
        if grant not in self.behind:
            self._noticed[grant] = asyncio.get_running_loop().time()
        self.behind[grant] = min(self.behind.get(grant, after), after)

    def clear(self, grant: str) -> None:
        self.behind.pop(grant, None)
        self._noticed.pop(grant, None)

    def due(self, grant: str, *, busy: bool) -> int | None:
        """The seq to fetch ``grant``'s receipts after, if they are to be fetched now."""
        after = self.behind.get(grant)
        if after is None or grant in self._fetching:
            return None
        noticed = self._noticed.get(grant)
        waited = asyncio.get_running_loop().time() - noticed if noticed is not None else None
        if busy and waited is not None and waited < GAP_PATIENCE_SECONDS:
            return None
        return after

    @contextlib.contextmanager
    def fetching(self, grant: str) -> Iterator[None]:
        self._fetching.add(grant)
        try:
            yield
        finally:
            self._fetching.discard(grant)

    async def filled(self, uow: UnitOfWork, grant: str, head: int) -> None:
        """The grant is no longer behind once every seq from where its gap began to the head
        is kept."""
        start = self.behind.get(grant)
        if start is None or head - start > MAX_FILLED_SPAN:
            return
        kept = await uow.usage_receipts.page(grant, m.REQUESTER, after=start, limit=head - start)
        if [item.seq for item in kept] == list(range(start + 1, head + 1)):
            self.clear(grant)


async def late_problem(
    uow: UnitOfWork, grant: str, seq: int, body: Mapping[str, Any], receipt: object
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
