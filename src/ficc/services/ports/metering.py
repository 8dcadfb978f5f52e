"""Metering's storage ports: a budget's rows (a grant's, a restricted token's), usage
records, and the chains of signed usage receipts, implemented as the other repositories are.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Protocol

from ficc.base.json_types import JSONObject
from ficc.domain.metering import GrantStanding, UsageQuery, UsageRecord
from ficc.domain.token_limits import TokenLimit, TokenRestrictions
from ficc.domain.usage_receipts import Head, StoredReceipt


class BudgetRows(Protocol):
    """Rows that hold a metered budget (a grant's, a restricted token's): reserve, settle,
    read; ``UsageRepository`` and ``TokenLimitsRepository`` both are."""

    async def reserve_tokens(self, holder: str, tokens: int, *, limit: int | None) -> bool: ...
    async def settle_tokens(
        self, holder: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None: ...
    async def standing(self, holder: str) -> GrantStanding | None: ...


class UsageRepository(Protocol):
    """Metering: token reservations on a grant, and one usage record per federated request."""

    async def reserve_tokens(self, grant_id: str, tokens: int, *, limit: int | None) -> bool:
        """Reserve ``tokens`` if settled + reserved + ``tokens`` stays within ``limit`` (None:
        always): one atomic step, whatever the concurrency; whether it was reserved."""
        ...

    async def settle_tokens(
        self, grant_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None: ...
    async def settle_and_stand(
        self, grant_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> GrantStanding | None:
        """:meth:`settle_tokens`, answering the grant's standing it leaves (one statement:
        the settlement is on every request, and reading the row again would be another)."""
        ...

    async def clear_reservations(self) -> None:
        """At start: no request is in flight, so nothing is held."""
        ...

    async def standing(self, grant_id: str) -> GrantStanding | None:
        """What the grant used and holds, read from its row alone (no related records)."""
        ...

    async def add(self, record: UsageRecord) -> None: ...
    async def of_requests(
        self, grant_id: str, side: str, requests: list[str]
    ) -> dict[str, UsageRecord]:
        """The records of these request IDs (the first of each)."""
        ...

    async def page(
        self, query: UsageQuery, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]: ...
    async def totals(self, query: UsageQuery) -> JSONObject: ...


class TokenLimitsRepository(Protocol):
    """Restricted tokens: their rules, their budgets reserved then settled as a grant's are
    (``UsageRepository``'s rule: one atomic step, whatever the concurrency), and the usage
    records each token made."""

    async def add(self, token_id: str, restrictions: TokenRestrictions) -> None: ...
    async def get(self, token_id: str) -> TokenLimit | None: ...
    async def of_tokens(self, token_ids: Collection[str]) -> dict[str, TokenLimit]: ...
    async def reserve_tokens(self, token_id: str, tokens: int, *, limit: int | None) -> bool: ...
    async def settle_tokens(
        self, token_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Give back what was reserved, add the true counts and count the request."""
        ...

    async def standing(self, token_id: str) -> GrantStanding | None: ...
    async def clear_reservations(self) -> None: ...
    async def usage_page(
        self, token_id: str, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]: ...
    async def usage_totals(self, token_id: str) -> JSONObject: ...


class UsageReceiptsRepository(Protocol):
    """Each side's usage receipts, by grant and seq, and the last reconciliation reports."""

    async def head(self, grant_id: str, side: str) -> Head:
        """The receipt of the highest seq kept (seq 0 and 64 zeros when none is)."""
        ...

    async def add(self, receipt: StoredReceipt) -> bool:
        """Keep ``receipt``; False (nothing written) when one is kept at its seq already."""
        ...

    async def append(self, receipt: StoredReceipt) -> None:
        """Keep ``receipt``, past the head the caller read in this transaction (one
        statement: nothing can be at its seq)."""
        ...

    async def append_after(self, receipt: StoredReceipt, head: Head) -> bool:
        """Keep ``receipt`` only while ``head`` is still the chain's head (the receipt at its
        seq has its digest and none is past it; for the empty head, none is kept): one
        statement, so a head remembered from an earlier transaction is checked here, never
        trusted. False (nothing written) when it is not the head."""
        ...

    async def add_signed(
        self, record: UsageRecord, receipt: StoredReceipt, head: Head | None
    ) -> bool:
        """Keep the grantor's usage ``record`` with the ``receipt`` it signed of it, as
        ``append_after`` keeps a receipt (``head`` None: past the head the caller read in this
        transaction, as ``append``). False, neither written, when ``head`` is not the chain's
        head. On SQL, one row."""
        ...

    async def page(
        self, grant_id: str, side: str, *, after: int, limit: int
    ) -> list[StoredReceipt]: ...
    async def of_requests(
        self, grant_id: str, side: str, requests: list[str]
    ) -> dict[str, StoredReceipt]:
        """The receipts kept of these request IDs (the lowest seq of each)."""
        ...

    async def mark(self, grant_id: str, side: str, seq: int, problem: str | None) -> None:
        """Set whether the receipt at ``seq`` verified (``problem`` None) or why not."""
        ...

    async def save_report(
        self, grant_id: str, peer_id: str, at: datetime, report: JSONObject
    ) -> None: ...
    async def last_report(self, grant_id: str) -> JSONObject | None: ...
