"""The requester's usage records: each ``inference.invoke`` sent under a grant is recorded
however it ends, with what its grantor told and what this side counted itself, and a
restricted token's budgets are settled with the record.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ficc.base.canonical import canonical_json
from ficc.base.errors import FiccError
from ficc.base.json_types import JSONObject
from ficc.base.request_ids import current_request_id
from ficc.domain import metering as m
from ficc.domain.exchanges import Exchange
from ficc.domain.operations import INVOKE
from ficc.domain.peers import Peer
from ficc.domain.rate_limit_headers import spent_limit
from ficc.services.federation.usage_receipts import UsageReceipts
from ficc.services.metering import outcome_of, settle_surely, split_usage_event
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.remote.prepared import Prepared
from ficc.services.token_limits import TokenLimits, TokenTab


@dataclass(eq=False)
class RequesterUsage:
    """The usage records of the requests this cluster sends, and what each grantor last told."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    tokens: TokenLimits | None
    receipts: UsageReceipts | None
    """Checks and keeps the usage receipts answers carry (None: none kept)."""
    told: dict[str, JSONObject] = field(default_factory=dict, init=False)
    """The last counts and allowances each grantor told, by grant (for rate headers)."""
    _told_at: dict[str, datetime] = field(default_factory=dict, init=False, repr=False)
    _open: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    """Requests under way through each grant (their receipts are still to come)."""
    on_settled: Callable[[str, str, int, int], None] | None = field(default=None, init=False)

    async def catch_up(self, peer: Peer, grant_id: str) -> None:
        """Receipts the grant's chain lacks here are fetched before its next request."""
        if self.receipts is not None:
            await self.receipts.catch_up(peer, grant_id, busy=self._open.get(grant_id, 0) > 0)

    @contextlib.asynccontextmanager
    async def recording(self, prepared: Prepared) -> AsyncIterator[_Usage]:
        """One usage record of a prepared ``inference.invoke`` (its operation body
        ``body_bytes`` long, RFC 8785), written however the request ends; a restricted token's
        budgets hold it before it is sent (its completion bound lowered to what they leave)
        and are settled with the record."""
        grant_id, principal = prepared.grant_id, prepared.principal
        inner = prepared.wire.get("body")
        service = inner.get("service") if isinstance(inner, dict) else None
        usage = _Usage(
            peer=prepared.peer,
            grant=grant_id,
            request=current_request_id.get() or "",
            operation=INVOKE,
            service=service if isinstance(service, str) else None,
            started_at=self.clock(),
            request_bytes=prepared.body_bytes,
        )
        if principal is not None and self.tokens is not None:
            # A token's refusal leaves no record under the grant: nothing left this cluster.
            usage.token = principal.token_id
            usage.tab = await self.tokens.admit(principal, *_invocation(inner))
            if usage.tab is not None and isinstance(inner, dict):
                inner["body"] = usage.tab.bounded(*_invocation(inner))
                # The body sent is the bounded one: measured as the grantor will measure it.
                usage.request_bytes = len(canonical_json(inner))
        self._open[grant_id] = self._open.get(grant_id, 0) + 1
        try:
            try:
                yield usage
            except BaseException as error:
                await settle_surely(self._record(usage, outcome_of(error)))
                raise
            if usage.error is not None:
                outcome = outcome_of(usage.error)
            else:
                # Left before its end without an error: the caller went away.
                outcome = m.COMPLETED if usage.ended else m.CANCELLED
            await self._record(usage, outcome)
        finally:
            if self._open[grant_id] == 1:
                del self._open[grant_id]
            else:
                self._open[grant_id] -= 1

    async def _record(self, usage: _Usage, outcome: str) -> None:
        told = m.parse_told(usage.told)
        prompt, completion = (
            told if told is not None else (usage.own_prompt or 0, usage.own_completion or 0)
        )
        record = replace(
            usage.record(usage.grant, m.REQUESTER, (prompt, completion), outcome, self.clock()),
            counted_prompt_tokens=usage.own_prompt,
            counted_completion_tokens=usage.own_completion,
            told=told is not None,
            token=usage.token,
        )
        if told is not None and isinstance(usage.told, dict):
            self.told[usage.grant] = usage.told
            self._told_at[usage.grant] = self.clock()
        async with self.uow_factory() as uow:
            if usage.tab is not None and self.tokens is not None:
                await self.tokens.settle(uow, usage.tab, prompt, completion, sent=usage.sent)
            await uow.usage.add(record)
            if self.receipts is not None:
                receipt = usage.told.get("receipt") if isinstance(usage.told, dict) else None
                await self.receipts.keep(uow, usage.peer, record, receipt)
            await uow.commit()
        if self.on_settled is not None:
            self.on_settled("out", INVOKE, prompt, completion)

    def known_refusal(self, grant_id: str) -> str | None:
        """The grant's rule its grantor last said is spent (a budget at 0, a window at 0 not
        reset since)."""
        told = self.told.get(grant_id)
        if told is None:
            return None
        age = (self.clock() - self._told_at[grant_id]).total_seconds()
        return spent_limit(told, age)


async def metered_stream(
    chunks: AsyncIterator[bytes], usage: _Usage
) -> AsyncGenerator[bytes, None]:
    """The chunks, the grantor's usage event taken off and kept, with what this side
    counted itself: each event after the first (the role) one token, as engines stream."""
    events = 0
    try:
        async for joined in chunks:
            chunk, told = split_usage_event(joined)
            if told is not None:
                usage.told = told
            if not chunk:
                continue
            usage.response_bytes += len(chunk)
            events += chunk.count(b"data: ") - chunk.count(b"data: [DONE]")
            usage.own_completion = max(events - 1, 0)
            yield chunk
    except Exception as exc:
        # The caller turns it into the stream's error event: kept for the record.
        usage.error = exc
        raise
    usage.ended = True


@dataclass(kw_only=True)
class _Usage(Exchange):
    """What the requester learns of one ``inference.invoke`` as it goes."""

    peer: Peer
    grant: str
    told: Any = None
    own_prompt: int | None = None
    own_completion: int | None = None
    """What this side counted itself (None: it did not count that)."""
    ended: bool = False
    """The answer arrived whole."""
    error: Exception | None = None
    """What ended the stream, when its caller made an error event of it."""
    token: str | None = None
    """The local token that made the request."""
    tab: TokenTab | None = None
    """What a restricted token's budgets hold for it."""

    @property
    def sent(self) -> bool:
        """Whether the request may have left (else a token is charged nothing)."""
        return not isinstance(self.error, FiccError) or self.told is not None or self.ended


def _invocation(inner: object) -> tuple[str, JSONObject]:
    """The OpenAI path and body an ``inference.invoke`` carries (checked by ``_wire``'s
    caller as the grantor checks them; anything else counts as an empty chat)."""
    if isinstance(inner, dict):
        path, body = inner.get("path"), inner.get("body")
        if isinstance(path, str) and isinstance(body, dict):
            return path, body
    return "", {}
