"""Metering of grants: reserve, then settle; rolling windows; one usage record per request.

Budgets, windows and reservations are :mod:`ficc.services.budgets`; this module meters a
grant's requests with them and records each one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from ficc.base.canonical import canonical_json
from ficc.base.errors import (
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    LimitExceeded,
    TooLarge,
)
from ficc.base.json_types import JSONObject
from ficc.base.request_ids import current_request_id
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.domain.exchanges import Exchange
from ficc.domain.grants import Grant
from ficc.domain.openai_requests import EMBEDDINGS_PATH
from ficc.domain.operations import invoke_path
from ficc.services.budgets import Budgets, grant_budget
from ficc.services.ports import Clock, UnitOfWork, UnitOfWorkFactory
from ficc.services.ports.peers import HeldChunk, ending_reason

REFUSALS: Final = (LimitExceeded, GrantRevoked, GrantExpired, TooLarge)
"""What refuses a request under a grant before any work (the grant's end is recorded as
``revoked`` on both sides, a limit as ``refused``)."""


def outcome_of(error: BaseException, *, engine_started: bool = False) -> str:
    """How a request that ended with ``error`` is recorded, alike on both sides: the grant's
    end is ``revoked``; a limit before any engine work ``refused`` (``response_bytes``, found
    while answering, is a failure); the caller leaving ``cancelled``; anything else
    ``failed``."""
    if isinstance(error, GrantRevoked | GrantExpired):
        return m.REVOKED
    if isinstance(error, LimitExceeded | TooLarge):
        late = engine_started or error.details.get("limit") == "response_bytes"
        return m.FAILED if late else m.REFUSED
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return m.CANCELLED
    return m.FAILED


@dataclass
class TokenHold:
    """Tokens of a grant's budget held in the transaction that admitted a request, enough
    for any prompt its body can hold and the completion it asks for: its reservation then
    needs no transaction of its own. Its tab takes it over; one never taken is given back."""

    grant_id: str
    tokens: int
    taken: bool = False


def hold_for(grant: Grant, body: JSONObject, body_bytes: int) -> int:
    """What to hold for an ``inference.invoke`` of ``body`` (``body_bytes`` long) under
    ``grant``: the most its prompt can count (a token per byte of the body, which holds the
    prompt's text, and what a template adds) and the completion it asks for; everything the
    budget leaves when it asks no bound (as its reservation would take). 0: nothing to hold."""
    left = grant.remaining_tokens()
    inner, path = body.get("body"), body.get("path")
    if left is None or not isinstance(inner, dict) or not isinstance(path, str):
        return 0
    try:
        path = invoke_path(path)
    except InvalidInput:
        return 0
    _, asked = m.requested_max_tokens(inner)
    if asked is None and path != EMBEDDINGS_PATH:
        return left
    completion = 0 if path == EMBEDDINGS_PATH else max(asked or 0, 0)
    _, items = m.prompt_text(path, inner)
    return body_bytes + m.template_allowance(path, items) + completion


@dataclass(kw_only=True)
class Tab(Exchange):
    """One metered request as it goes: what it reserved, what it used, what it sent."""

    grant: Grant
    reservation: m.Reservation | None = None
    reserved_in_db: int = 0
    held: int = 0
    """What its admission held of the grant's row (:class:`TokenHold`), part of
    ``reserved_in_db`` until the reservation replaces it."""
    window_entry: list[float] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    engine_started: bool = False
    told: JSONObject | None = None
    admit_hook: Callable[[int, int | None], Awaitable[int | None]] | None = None

    async def admit(self, prompt_tokens: int, max_tokens: int | None) -> int | None:
        """Reserve for a prompt of ``prompt_tokens`` asking ``max_tokens``; the completion
        bound to send the engine (None: leave the request's own)."""
        assert self.admit_hook is not None
        return await self.admit_hook(prompt_tokens, max_tokens)


class Meter(Budgets):
    """The grantor's metering, one per cluster (see :mod:`ficc.services.budgets`)."""

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        clock: Clock,
        sign: Callable[[bytes], bytes] | None = None,
    ) -> None:
        super().__init__(uow_factory, clock)
        self._sign = sign
        """The cluster key's signature: each usage record is signed as a receipt (None: not,
        for tests of metering alone)."""
        self._heads: dict[str, r.Head] = {}
        """The last receipt this process signed of each grant: where the next one goes."""
        self.settled: list[tuple[str, str, int, int]] = []
        """(direction, operation, prompt, completion) waiting for the metrics to take."""
        self.on_settled: Callable[[str, str, int, int], None] | None = None

    def open_tab(
        self,
        grant: Grant,
        request: str,
        operation: str,
        service: str | None,
        request_bytes: int,
        hold: TokenHold | None = None,
    ) -> Tab:
        tab = Tab(
            grant=grant,
            request=request,
            operation=operation,
            service=service,
            started_at=self._clock(),
            request_bytes=request_bytes,
        )
        if hold is not None and not hold.taken:
            hold.taken = True
            tab.held = tab.reserved_in_db = hold.tokens

        async def admit(prompt_tokens: int, max_tokens: int | None) -> int | None:
            return await self._reserve(tab, prompt_tokens, max_tokens)

        tab.admit_hook = admit
        return tab

    def request_tab(
        self,
        grant: Grant,
        operation: str,
        body: JSONObject,
        body_bytes: int,
        hold: TokenHold | None = None,
    ) -> Tab:
        """The tab of the request under way under ``grant``: its request ID, and the service
        its body names (None when the body names none)."""
        service = body.get("service")
        return self.open_tab(
            grant,
            current_request_id.get() or "",
            operation,
            service if isinstance(service, str) else None,
            body_bytes,
            hold,
        )

    async def _reserve(self, tab: Tab, prompt_tokens: int, max_tokens: int | None) -> int | None:
        """Reserve the request's tokens in the grant's budgets, before any engine work."""
        tab.prompt_tokens = prompt_tokens
        held = {tab.grant.id: tab.held} if tab.held else None
        holding = await self.reserve([grant_budget(tab.grant)], prompt_tokens, max_tokens, held)
        tab.reservation = holding.reservation
        tab.reserved_in_db = holding.reserved.get(tab.grant.id, 0)
        tab.window_entry = holding.token_entries[0][1] if holding.token_entries else None
        return holding.reservation.completion_tokens if tab.grant.terms.limits_tokens else None

    async def hold_tokens(
        self, uow: UnitOfWork, grant: Grant, body: JSONObject, body_bytes: int
    ) -> TokenHold | None:
        """Hold what an invoke of ``body`` can need of ``grant``'s budget, in the caller's
        transaction (the admission's), if it fits; None: nothing held (its reservation
        then reads the row in its own transaction, and refuses as it always did)."""
        tokens = hold_for(grant, body, body_bytes)
        if tokens <= 0:  # no token budget, or nothing to hold
            return None
        if not await uow.usage.reserve_tokens(grant.id, tokens, limit=grant.terms.tokens):
            return None
        return TokenHold(grant.id, tokens)

    async def release(self, hold: TokenHold) -> None:
        """Give back a hold no tab took (the request ended before it was metered)."""
        if hold.taken:
            return
        hold.taken = True
        async with self._uow_factory() as uow:
            await uow.usage.settle_tokens(
                hold.grant_id, reserved=hold.tokens, prompt_tokens=0, completion_tokens=0
            )
            await uow.commit()

    async def settle(self, tab: Tab, outcome: str) -> JSONObject:
        """Settle the tab to its true counts and record it; what the requester is told.
        Once only: a later call answers what the first one told."""
        if tab.told is not None:
            return tab.told
        prompt, completion = (tab.prompt_tokens, tab.completion_tokens)
        if not tab.engine_started and outcome != m.COMPLETED:
            prompt, completion = 0, 0
        if tab.reservation is not None:
            prompt, completion = m.settled(tab.reservation, prompt, completion)
        else:
            prompt, completion = 0, 0
        if tab.window_entry is not None:
            self._of(tab.grant.id).tokens.adjust(tab.window_entry, prompt + completion)
        record = tab.record(tab.grant.id, m.GRANTOR, (prompt, completion), outcome, self._clock())
        async with self._uow_factory() as uow:
            # First: its UPDATE takes the grant's row lock, which orders the receipts below.
            standing = await uow.usage.settle_and_stand(
                tab.grant.id,
                reserved=tab.reserved_in_db,
                prompt_tokens=prompt,
                completion_tokens=completion,
            )
            receipt = await self._signed(uow, record)
            await uow.commit()
        tab.reserved_in_db = 0
        if self.on_settled is not None:
            self.on_settled("in", tab.operation, prompt, completion)
        now_grant = tab.grant
        if standing is not None:
            now_grant = replace(
                tab.grant,
                requests_used=standing.requests_used,
                transfer_bytes_used=standing.transfer_bytes_used,
                prompt_tokens_used=standing.prompt_tokens_used,
                completion_tokens_used=standing.completion_tokens_used,
                tokens_reserved=standing.tokens_reserved,
            )
        told = m.told_usage(prompt, completion, now_grant.remaining(), self.window_state(now_grant))
        if receipt is not None:
            told["receipt"] = receipt
        tab.told = told
        return told

    async def _signed(self, uow: UnitOfWork, record: m.UsageRecord) -> JSONObject | None:
        """Keep ``record`` and, with a key, sign it as the next receipt of its grant, in the
        record's transaction (one row): the settlement's UPDATE of the grant's row, made
        first, orders concurrent ones, so the seqs of a grant have no gap and no repeat."""
        if self._sign is None:
            await uow.usage.add(record)
            return None
        head = self._heads.get(record.grant)
        if head is not None:
            # The head this process signed last, if it still is the chain's (checked by the
            # INSERT itself): the common case reads nothing.
            receipt, stored = self._receipt(record, head)
            if await uow.usage_receipts.add_signed(record, stored, head):
                self._heads[record.grant] = r.Head(stored.seq, stored.digest, stored.body["totals"])
                return receipt
        head = await uow.usage_receipts.head(record.grant, m.GRANTOR)
        receipt, stored = self._receipt(record, head)
        await uow.usage_receipts.add_signed(record, stored, None)
        # Remembered before the commit: a transaction that rolls back leaves a head that the
        # next INSERT finds is not the chain's, and that one reads the chain's again.
        self._heads[record.grant] = r.head_after(receipt)
        return receipt

    def _receipt(self, record: m.UsageRecord, head: r.Head) -> tuple[JSONObject, r.StoredReceipt]:
        assert self._sign is not None
        receipt, text = r.signed_receipt(r.receipt_body(record, head), self._sign)
        stored = r.StoredReceipt(
            grant=record.grant,
            side=m.GRANTOR,
            seq=head.seq + 1,
            request=record.request,
            receipt=receipt,
            verified=True,
            text=text,
        )
        return receipt, stored

    async def record_refused(self, tab: Tab, error: FiccError) -> None:
        """A request refused before any work still leaves its record."""
        await self.settle(tab, outcome_of(error))

    @contextlib.asynccontextmanager
    async def metered(
        self, tab: Tab, slot_reason: Callable[[], FiccError | None]
    ) -> AsyncIterator[Tab]:
        """Settle ``tab`` on every exit: completed, refused (before any engine work),
        revoked (the grant ended it), cancelled (the requester left) or failed."""
        try:
            yield tab
        except (asyncio.CancelledError, GeneratorExit) as ended:
            reason = slot_reason()
            if isinstance(ended, asyncio.CancelledError):
                reason = ending_reason(ended) or reason
            await settle_surely(self.settle(tab, outcome_of(reason or ended)))
            raise
        except BaseException as error:
            outcome = outcome_of(error, engine_started=tab.engine_started)
            await settle_surely(self.settle(tab, outcome))
            raise


async def settle_surely(settling: Awaitable[Any]) -> None:
    """Settle even while the request is being cancelled: the settlement runs as its own task
    (a second cancel of this one does not stop it), so a reservation is never left held."""
    task = asyncio.ensure_future(settling)
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(task)


USAGE_EVENT: Final = b"event: ficc.usage\ndata: "
"""How the grantor's counts start the last event of a stream it answers (docs/protocol.md)."""


def usage_event(told: JSONObject) -> bytes:
    """The stream's last event: what the grantor counted and what the grant has left."""
    return HeldChunk(USAGE_EVENT + canonical_json(told) + b"\n\n")


def parse_usage_event(chunk: bytes) -> JSONObject | None:
    """The grantor's counts, if ``chunk`` is its usage event; None for any other chunk."""
    if not chunk.startswith(USAGE_EVENT):
        return None
    try:
        value = json.loads(chunk[len(USAGE_EVENT) :])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def split_usage_event(chunk: bytes) -> tuple[bytes, JSONObject | None]:
    """The events of ``chunk`` before the grantor's usage event, and that event's counts.

    The requester joins the chunks that waited while its caller read (coalesced writes), so
    the usage event may end a chunk of other events. It is found only at an event's start: a
    ``data:`` line is one line of JSON, which holds no raw newline.
    """
    start = 0 if chunk.startswith(USAGE_EVENT) else chunk.find(b"\n\n" + USAGE_EVENT) + 2
    if start == 1:
        return chunk, None
    told = parse_usage_event(chunk[start:])
    return (chunk[:start], told) if told is not None else (chunk, None)
