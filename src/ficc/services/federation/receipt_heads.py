"""The requester's common case of keeping a usage receipt, without reading its chain.

Nearly every receipt an answer carries is the one right after the last this side kept of
its grant. Remembering that head saves reading the chain on every request; the INSERT itself
checks that the head is still the chain's (another transaction may have kept or fetched
receipts since, or the one that kept it rolled back), so a remembered head is never trusted:
when it moved, the caller reads the chain and checks the receipt as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.domain.peers import Peer
from ficc.domain.receipts import unb64
from ficc.services.federation.common import Verify, log
from ficc.services.ports import UnitOfWork


class KeptHeads:
    """The receipt this side kept last of each grant, as the chain's head reads it back."""

    def __init__(self, verify: Verify) -> None:
        self._verify = verify
        self._heads: dict[str, r.Head] = {}

    def remember(self, stored: r.StoredReceipt) -> None:
        """``stored`` is now the last of its grant's chain (in the caller's transaction)."""
        self._heads[stored.grant] = r.head_kept(stored.receipt, stored.seq, stored.digest[:64])

    async def keep_next(
        self, uow: UnitOfWork, peer: Peer, record: m.UsageRecord, receipt: object
    ) -> r.StoredReceipt | None:
        """Check and keep ``receipt`` when it is the one right after the remembered head and
        that head is still the chain's; None otherwise (nothing written)."""
        head = self._heads.get(record.grant)
        raw = receipt.get("body") if isinstance(receipt, Mapping) else None
        if head is None or not isinstance(raw, Mapping) or raw.get("seq") != head.seq + 1:
            return None
        body, _, text = r.checked_alone(
            receipt, grant=record.grant, public_key=unb64(peer.cluster_key), verify=self._verify
        )
        if body is None:
            return None
        problem = r.COUNTS if not r.matches_record(body, record) else r.follows(body, head)
        assert isinstance(receipt, Mapping)
        stored = r.StoredReceipt(
            record.grant,
            m.REQUESTER,
            head.seq + 1,
            record.request,
            receipt,
            problem is None,
            problem,
            text,
        )
        if not await uow.usage_receipts.append_after(stored, head):
            return None
        # Its body checked whole: the head is read off it as it is.
        self._heads[record.grant] = r.Head(stored.seq, stored.digest, body["totals"])
        if problem is not None:
            log.warning(
                "grant %s: receipt %d fails verification: %s", record.grant, stored.seq, problem
            )
        return stored
