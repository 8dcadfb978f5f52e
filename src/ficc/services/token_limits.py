"""Restricted local tokens, enforced on this cluster before a request leaves it.

A token's ``peers`` and ``services`` travel with its principal (checked with no read: the
lists are already narrowed to its creator's when it was minted). Its budgets are metered by
:class:`ficc.services.metering.Meter`, the grants' rules reused: the request is reserved in the
token's budget and in each of its creators' (a child never spends more than its parent has
left), settled to the counts charged when the answer ends, and recorded, naming the token.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from ficc.base.canonical import canonical_json
from ficc.base.errors import FiccError
from ficc.base.json_types import JSONObject
from ficc.base.request_ids import current_request_id
from ficc.base.times import with_times_formatted
from ficc.domain import metering as m
from ficc.domain import token_limits as tl
from ficc.domain.openai_requests import EMBEDDINGS_PATH
from ficc.domain.openai_responses import RESPONSES_PATH
from ficc.domain.operations import INVOKE
from ficc.domain.principals import Principal
from ficc.domain.rate_limit_headers import duration_text, header_rule
from ficc.services.budgets import Budget, Holding
from ficc.services.local_streams import Counted
from ficc.services.metering import Meter, outcome_of, settle_surely
from ficc.services.ports import BudgetRows, Clock, UnitOfWork, UnitOfWorkFactory

MAX_CHAIN: Final = 32
"""Creators followed up from a token (a chain is as deep as tokens minted by tokens)."""


def _token_rows(uow: UnitOfWork) -> BudgetRows:
    return uow.token_limits


def budget_of(row: tl.TokenLimit) -> Budget:
    return Budget.of(row.token_id, _token_rows, row.restrictions, noun="token", rule=tl.RULE_PREFIX)


def check_peer(principal: Principal, peer_id: str) -> None:
    """403 for a peer outside the token's ``peers``."""
    rules = principal.restrictions
    if rules is not None and not rules.admits_peer(peer_id):
        raise tl.peer_refusal(peer_id)


def check_service(principal: Principal, service: str, *also: str | None) -> None:
    """403 for a service outside the token's ``services`` (``also``: the route it is reached
    through, by name and ID: a route listed admits its targets)."""
    rules = principal.restrictions
    if rules is not None and not rules.admits_service(service, *also):
        raise tl.service_refusal(service)


@dataclass
class TokenTab:
    """One request a restricted token made, as it goes: what it holds in the token's budgets."""

    token: str
    holding: Holding
    requests: list[tuple[str, list[float]]]
    bound: int | None
    """The completion the request may generate (None: its own ``max_tokens`` stands)."""
    settled: bool = False

    def bounded(self, path: str, body: Mapping[str, object]) -> JSONObject:
        """``body`` with its completion bound lowered to what the reservation leaves."""
        sent = dict(body)
        if self.bound is None or path == EMBEDDINGS_PATH:
            return sent
        name, asked = m.requested_max_tokens(body)
        if asked != self.bound:
            sent[name or ("max_output_tokens" if path == RESPONSES_PATH else "max_tokens")] = (
                self.bound
            )
        return sent


@dataclass
class _Left:
    """What a token's budgets left when its last request was settled (for rate headers)."""

    budgets: list[Budget]
    tokens_left: dict[str, int] = field(default_factory=dict)


class TokenLimits:
    """A cluster's restricted tokens: admission, settlement, usage and what remains."""

    def __init__(self, uow_factory: UnitOfWorkFactory, meter: Meter, clock: Clock) -> None:
        self._uow_factory = uow_factory
        self._meter = meter
        self._clock = clock
        self._left: dict[str, _Left] = {}

    async def _chain(self, uow: UnitOfWork, token_id: str) -> list[tl.TokenLimit]:
        rows: list[tl.TokenLimit] = []
        next_id: str | None = token_id
        while next_id is not None and len(rows) < MAX_CHAIN:
            row = await uow.token_limits.get(next_id)
            if row is None:
                break
            rows.append(row)
            next_id = row.restrictions.parent
        return rows

    async def admit(
        self, principal: Principal, path: str, body: Mapping[str, object]
    ) -> TokenTab | None:
        """Reserve an invocation of ``body`` in the token's budgets and its creators' (None:
        the credential is not restricted), or refuse with 429 naming the token's rule.

        The prompt is counted as the grantor's estimate counts it when it cannot ask the
        engine (one token per byte, plus what a chat template adds), never below the truth:
        settling charges the true counts, never past the reservation.
        """
        if principal.restrictions is None or principal.token_id is None:
            return None
        async with self._uow_factory() as uow:
            chain = await self._chain(uow, principal.token_id)
        budgets = [budget_of(row) for row in chain]
        requests = self._meter.hold_requests(budgets)
        try:
            text, items = m.prompt_text(path, body)
            prompt = m.estimated_tokens(text) + m.template_allowance(path, items)
            _, asked = m.requested_max_tokens(body)
            holding = await self._meter.reserve(
                budgets, prompt, 0 if path == EMBEDDINGS_PATH else asked
            )
        except BaseException:
            self._meter.release_requests(requests)
            raise
        bound = (
            holding.reservation.completion_tokens if any(b.limits_tokens for b in budgets) else None
        )
        return TokenTab(principal.token_id, holding, requests, bound)

    async def settle(
        self,
        uow: UnitOfWork,
        tab: TokenTab,
        prompt_tokens: int,
        completion_tokens: int,
        *,
        sent: bool = True,
    ) -> tuple[int, int]:
        """Settle ``tab`` inside the caller's transaction (the usage record's): the counts
        charged, never past the reservation; nothing charged for a request never sent."""
        if tab.settled:
            return 0, 0
        tab.settled = True
        if not sent:
            prompt_tokens, completion_tokens = 0, 0
            self._meter.release_requests(tab.requests)
        charged = m.settled(tab.holding.reservation, prompt_tokens, completion_tokens)
        await self._meter.settle_rows(uow, tab.holding, *charged)
        left = _Left(list(tab.holding.budgets))
        for budget in left.budgets:
            if budget.tokens is not None:
                standing = await uow.token_limits.standing(budget.holder)
                if standing is not None:
                    left.tokens_left[budget.holder] = standing.tokens_left(budget.tokens)
        self._left[tab.token] = left
        return charged

    async def release(self, tab: TokenTab) -> None:
        """A request refused before it was sent: give back all it held."""
        async with self._uow_factory() as uow:
            await self.settle(uow, tab, 0, 0, sent=False)
            await uow.commit()

    def rate_limits(self, principal: Principal, grant_headers: Mapping[str, str]) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers as the tighter of the token's rules (and its
        creators') and the grant's (``grant_headers``): for requests and for tokens, the rule
        that leaves the least names the limit, the remaining and the reset."""
        headers = dict(grant_headers)
        if principal.token_id is None:
            return headers
        left = self._left.get(principal.token_id)
        if left is None:
            return headers
        for kind in ("requests", "tokens"):
            best = header_rule(headers, kind)
            for budget in left.budgets:
                for candidate in self._candidates(budget, left, kind):
                    if best is None or candidate[1] < best[1]:
                        best = candidate
            if best is not None:
                limit, remaining, reset = best
                headers[f"x-ratelimit-limit-{kind}"] = str(limit)
                headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
                if reset is not None:
                    headers[f"x-ratelimit-reset-{kind}"] = reset
        return headers

    def _candidates(
        self, budget: Budget, left: _Left, kind: str
    ) -> list[tuple[int, int, str | None]]:
        windows = self._meter.windows_of(budget)
        found: list[tuple[int, int, str | None]] = []
        if kind == "tokens" and budget.tokens is not None:
            found.append((budget.tokens, left.tokens_left.get(budget.holder, budget.tokens), None))
        name, limit = (
            ("requests_per_minute", budget.requests_per_minute)
            if kind == "requests"
            else ("tokens_per_minute", budget.tokens_per_minute)
        )
        window = windows.get(name)
        if limit is not None and isinstance(window, dict):
            reset = duration_text(float(window["reset_seconds"]))
            found.append((limit, int(window["remaining"]), reset))
        return found

    # --- what the API shows -------------------------------------------------------------

    async def shown(self, token_ids: list[str]) -> dict[str, JSONObject]:
        """By token: its restrictions, ``used`` and ``remaining`` (the least its budget and
        its creators' leave; windows from this process's memory)."""
        async with self._uow_factory() as uow:
            rows = await uow.token_limits.of_tokens(token_ids)
            chains = {tid: await self._chain(uow, tid) for tid in rows}
        shown: dict[str, JSONObject] = {}
        for token_id, row in rows.items():
            chain = chains[token_id]
            lefts = [
                r.standing.tokens_left(r.restrictions.tokens)
                for r in chain
                if r.restrictions.tokens is not None
            ]
            windows = [self._meter.windows_of(budget_of(r)) for r in chain]
            remaining: dict[str, int | None] = {"tokens": min(lefts) if lefts else None}
            for name in ("tokens_per_minute", "requests_per_minute"):
                values = [state["remaining"] for w in windows if (state := w.get(name))]
                remaining[name] = min(values) if values else None
            s = row.standing
            shown[token_id] = {
                **row.restrictions.to_json(),
                "used": {
                    "requests": s.requests_used,
                    "prompt_tokens": s.prompt_tokens_used,
                    "completion_tokens": s.completion_tokens_used,
                },
                "remaining": remaining,
            }
        return shown

    async def usage(self, token_id: str, *, after: int | None, limit: int) -> JSONObject:
        """``GET /tokens/{id}/usage``: the records this token made, a page at a time, and
        their totals (the caller has checked the token is among those it may see)."""
        async with self._uow_factory() as uow:
            records = await uow.token_limits.usage_page(token_id, after=after, limit=limit + 1)
            totals = await uow.token_limits.usage_totals(token_id)
        more = len(records) > limit
        records = records[:limit]
        page: JSONObject = with_times_formatted(
            {
                "token": token_id,
                "records": [r.to_json() for r in records],
                "totals": totals,
                "next": str(records[-1].seq) if more and records else None,
            }
        )
        return page

    # --- local invocations ------------------------------------------------------------------

    async def local(
        self,
        principal: Principal,
        service: str,
        path: str,
        body: Mapping[str, object],
        call: Callable[[JSONObject], Awaitable[JSONObject]],
    ) -> JSONObject:
        """A plain answer of a local service for a restricted token: reserved, then settled
        to the engine's counts, recorded naming the token."""
        tab = await self.admit(principal, path, body)
        if tab is None:
            return await call(dict(body))
        started = self._clock()
        sent = tab.bounded(path, body)
        try:
            answer = await call(sent)
        except BaseException as error:
            await settle_surely(self._record_local(tab, service, sent, started, error=error))
            raise
        usage = m.parse_told(answer.get("usage")) or (0, 0)
        size = len(canonical_json(answer))
        await self._record_local(tab, service, sent, started, counts=usage, response_bytes=size)
        return answer

    @contextlib.asynccontextmanager
    async def local_stream(
        self,
        principal: Principal,
        service: str,
        path: str,
        body: Mapping[str, object],
        opening: Callable[
            [JSONObject], contextlib.AbstractAsyncContextManager[AsyncIterator[bytes]]
        ],
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A stream of a local service for a restricted token: reserved before it opens,
        settled when it ends (each event after the first one token, as engines stream)."""
        tab = await self.admit(principal, path, body)
        if tab is None:
            async with opening(dict(body)) as chunks:
                yield chunks
            return
        started = self._clock()
        sent = tab.bounded(path, body)
        counted = Counted()
        try:
            async with opening(sent) as chunks:
                counting = counted.count(chunks)
                async with contextlib.aclosing(counting):
                    yield counting
        except BaseException as error:
            await settle_surely(
                self._record_local(
                    tab,
                    service,
                    sent,
                    started,
                    error=error,
                    counts=counted.counts,
                    response_bytes=counted.sent_bytes,
                )
            )
            raise
        # Left before its end without an error: the caller went away.
        await self._record_local(
            tab,
            service,
            sent,
            started,
            counts=counted.counts,
            response_bytes=counted.sent_bytes,
            cancelled=not counted.ended,
        )

    async def _record_local(
        self,
        tab: TokenTab,
        service: str,
        sent: Mapping[str, object],
        started: datetime,
        *,
        error: BaseException | None = None,
        counts: tuple[int, int] = (0, 0),
        response_bytes: int = 0,
        cancelled: bool = False,
    ) -> None:
        if error is not None:
            outcome = outcome_of(error)
        else:
            outcome = m.CANCELLED if cancelled else m.COMPLETED
        refused = isinstance(error, FiccError) and outcome == m.REFUSED
        async with self._uow_factory() as uow:
            prompt, completion = await self.settle(uow, tab, *counts, sent=not refused)
            await uow.usage.add(
                m.UsageRecord(
                    request=current_request_id.get() or "",
                    grant="",
                    side=m.LOCAL,
                    operation=INVOKE,
                    service=service,
                    started_at=started,
                    ended_at=self._clock(),
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    request_bytes=len(canonical_json(dict(sent))),
                    response_bytes=response_bytes,
                    outcome=outcome,
                    token=tab.token,
                )
            )
            await uow.commit()
