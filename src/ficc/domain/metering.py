"""Metered grants: what a request reserves, the rolling windows, and usage records.

"The grantor admits an ``inference.invoke`` only if its prompt tokens plus the request's
``max_tokens`` (capped to what remains when absent or larger) fit both budgets; it reserves
that amount, and settles to the true count when the answer ends." Pure rules: times are
arguments (seconds on any one monotonic scale), nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ficc.base.errors import LimitExceeded
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH

WINDOW_SECONDS: Final = 60.0
"""``tokens_per_minute`` and ``requests_per_minute`` count over a rolling 60-second window."""

TEMPLATE_TOKENS: Final = 64
"""Tokens a chat template may add around the messages (a default system prompt, the
assistant's header): counted on top of the messages, so the estimate stays above the truth."""
TOKENS_PER_MESSAGE: Final = 8
"""The role and the markers a chat template puts around each message."""

COMPLETED: Final = "completed"
CANCELLED: Final = "cancelled"
REVOKED: Final = "revoked"
FAILED: Final = "failed"
REFUSED: Final = "refused"
OUTCOMES: Final = (COMPLETED, CANCELLED, REVOKED, FAILED, REFUSED)

GRANTOR: Final = "grantor"
REQUESTER: Final = "requester"
LOCAL: Final = "local"
"""A restricted token's invocation of a local service (no grant): recorded for its usage."""


class RollingWindow:
    """Amounts charged at moments, summed over the last :data:`WINDOW_SECONDS`.

    An entry is a two-item list ``[at, amount]`` so that a reservation can be settled in place
    (its moment stays: what it reserved counted from then); one that left the window is
    emptied, so settling it is one check, not a search of the window (which holds a minute of
    requests).
    """

    def __init__(self) -> None:
        self._entries: deque[list[float]] = deque()
        self._total = 0.0

    def _prune(self, now: float) -> None:
        horizon = now - WINDOW_SECONDS
        entries = self._entries
        while entries and entries[0][0] <= horizon:
            gone = entries.popleft()
            self._total -= gone[1]
            gone.clear()

    def total(self, now: float) -> int:
        self._prune(now)
        return int(self._total)

    def add(self, now: float, amount: int) -> list[float]:
        entry = [now, float(amount)]
        self._entries.append(entry)
        self._total += amount
        return entry

    def adjust(self, entry: list[float], amount: int) -> None:
        """Settle ``entry`` to ``amount`` (nothing if it already left the window)."""
        if entry:
            self._total += amount - entry[1]
            entry[1] = float(amount)

    def remove(self, entry: list[float]) -> None:
        self.adjust(entry, 0)

    def retry_after(self, now: float, needed: int, limit: int) -> int:
        """Whole seconds until ``needed`` more fits under ``limit`` (at least 1)."""
        self._prune(now)
        over = self._total + needed - limit
        for at, amount in self._entries:
            over -= amount
            if over <= 0:
                return max(1, math.ceil(at + WINDOW_SECONDS - now))
        return max(1, math.ceil(WINDOW_SECONDS))

    def reset_seconds(self, now: float) -> float:
        """Seconds until the window is empty again (0 when it is)."""
        self._prune(now)
        if not self._entries:
            return 0.0
        return max(self._entries[-1][0] + WINDOW_SECONDS - now, 0.0)

    def empty(self, now: float) -> bool:
        self._prune(now)
        return not self._entries


def window_refusal(
    name: str, limit: int, retry_after: int, *, holder: str = "grant", rule: str = ""
) -> LimitExceeded:
    """The refusal of a rate rule: 429 naming it (``rule`` + its name: a token's rules are
    ``token.…``), with ``Retry-After``."""
    unit = "requests" if name == "requests_per_minute" else "tokens"
    return LimitExceeded(
        f"the {holder} allows {limit} {unit} per minute; try again in {retry_after} s",
        details={"limit": rule + name, "allowed": limit, "retry_after_seconds": retry_after},
    )


def budget_refusal(
    needed: int, remaining: int, *, holder: str = "grant", rule: str = ""
) -> LimitExceeded:
    return LimitExceeded(
        f"the request needs {needed} tokens; the {holder} has {remaining} left",
        details={"limit": rule + "tokens", "needed": needed, "remaining": remaining},
    )


MAX_TOKENS_FIELDS: Final = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def requested_max_tokens(body: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The field a request bounds its completion with, and the bound (None: unbounded)."""
    for name in MAX_TOKENS_FIELDS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return name, value
    return None, None


def prompt_text(path: str, body: Mapping[str, Any]) -> tuple[str, int]:
    """The text a request's prompt holds, and how many messages (or inputs) it has: chat's
    ``messages`` (and ``tools``), a completion's ``prompt``, embeddings' or a Responses
    request's ``input`` (and ``instructions``)."""
    if path == CHAT_COMPLETIONS_PATH:
        messages = body.get("messages")
        items = messages if isinstance(messages, list) else []
        parts = [_text_of(m.get("content")) if isinstance(m, dict) else "" for m in items]
        if body.get("tools") is not None:
            parts.append(repr(body["tools"]))
        return "\n".join(parts), len(items)
    value = body.get("prompt" if path == COMPLETIONS_PATH else "input")
    inputs: list[Any] = value if isinstance(value, list) else [value]
    texts = [_text_of(item) for item in inputs]
    if isinstance(body.get("instructions"), str):
        texts.append(body["instructions"])
    return "\n".join(texts), len(inputs)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(part) for part in content)
    if isinstance(content, dict):
        for key in ("text", "content", "input_text"):
            if key in content:
                return _text_of(content[key])
        return repr(content)
    return "" if content is None else repr(content)


def template_allowance(path: str, messages: int) -> int:
    """What a template adds to the text of a prompt: chat templates only."""
    if path in (EMBEDDINGS_PATH, COMPLETIONS_PATH):
        return 0
    return TEMPLATE_TOKENS + TOKENS_PER_MESSAGE * messages


def estimated_tokens(text: str) -> int:
    """A count that is never below a byte-level tokenizer's: one token per UTF-8 byte.

    For engines without a tokenizer FICC can ask (the ``openai`` runtime's upstream): a
    token of a byte-level BPE spans at least one byte, so this overstates, never understates.
    """
    return len(text.encode())


@dataclass(frozen=True)
class Reservation:
    """What one admitted request holds: its prompt count, the completion it may generate
    (None: unbounded, the grant limits no tokens) and the total reserved."""

    prompt_tokens: int
    completion_tokens: int | None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + (self.completion_tokens or 0)


def least_needed(prompt_tokens: int, max_tokens: int | None) -> int:
    """The fewest tokens a request can be admitted with: its prompt and one token of
    completion (none for a request that generates nothing: embeddings ask ``max_tokens`` 0)."""
    return prompt_tokens + (0 if max_tokens == 0 else 1)


def reserve(
    prompt_tokens: int,
    max_tokens: int | None,
    allowance: int | None,
    *,
    holder: str = "grant",
    rule: str = "",
) -> Reservation:
    """The reservation of a request whose prompt is ``prompt_tokens``, asking for at most
    ``max_tokens`` (None: absent), when at most ``allowance`` tokens may be taken (None: no
    token rule applies). The completion is capped to what remains; nothing left for one
    token of completion refuses the request."""
    if allowance is None:
        return Reservation(prompt_tokens, max_tokens)
    room = allowance - prompt_tokens
    if prompt_tokens + room < least_needed(prompt_tokens, max_tokens):
        raise budget_refusal(
            least_needed(prompt_tokens, max_tokens), max(allowance, 0), holder=holder, rule=rule
        )
    completion = room if max_tokens is None else min(max_tokens, room)
    return Reservation(prompt_tokens, completion)


def settled(
    reservation: Reservation, prompt_tokens: int, completion_tokens: int
) -> tuple[int, int]:
    """The counts charged for a request: the true ones, never past what it reserved (an
    estimate that fell short is the grantor's error, not the partner's: the budget holds)."""
    if reservation.completion_tokens is None:
        return prompt_tokens, completion_tokens
    prompt = min(prompt_tokens, reservation.tokens)
    completion = min(completion_tokens, reservation.tokens - prompt)
    return prompt, completion


@dataclass(frozen=True)
class GrantStanding:
    """A grant's counters as its row holds them: what metering reads on every request."""

    requests_used: int
    transfer_bytes_used: int
    prompt_tokens_used: int
    completion_tokens_used: int
    tokens_reserved: int

    def tokens_left(self, limit: int) -> int:
        used = self.prompt_tokens_used + self.completion_tokens_used + self.tokens_reserved
        return max(limit - used, 0)


@dataclass(frozen=True)
class UsageRecord:
    """One federated request as one side saw it; ``request`` is the same ID on both sides.

    ``counted_*``: on the requester, what it counted itself beside what the grantor told it
    (``prompt_tokens`` and ``completion_tokens``); None where nothing was counted.
    """

    request: str
    grant: str
    side: str
    operation: str
    service: str | None
    started_at: datetime
    ended_at: datetime
    prompt_tokens: int
    completion_tokens: int
    request_bytes: int
    response_bytes: int
    outcome: str
    counted_prompt_tokens: int | None = None
    counted_completion_tokens: int | None = None
    told: bool | None = None
    """On the requester: whether the grantor told its counts (it cannot when the answer ends
    early: cancelled, revoked, failed); untold, the counts are this side's own."""
    seq: int = 0
    """The record's place in its store, the cursor of a page (set when stored)."""
    token: str | None = None
    """The local token that made the request (this side's records only: never told a peer)."""

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "request": self.request,
            "grant": self.grant or None,
            "operation": self.operation,
            "service": self.service,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "outcome": self.outcome,
        }
        if self.side == REQUESTER:
            record["counted"] = {
                "prompt_tokens": self.counted_prompt_tokens,
                "completion_tokens": self.counted_completion_tokens,
            }
            record["told"] = bool(self.told)
        if self.side in (REQUESTER, LOCAL):
            record["token"] = self.token
        return record


@dataclass(frozen=True)
class UsageQuery:
    """One side's records of a grant, started in ``[since, until)`` where given: what a page
    of records and its totals are read over."""

    grant_id: str
    side: str
    since: datetime | None = None
    until: datetime | None = None

    def holds(self, record: UsageRecord) -> bool:
        """Whether ``record`` is one of those asked for."""
        return (
            record.grant == self.grant_id
            and record.side == self.side
            and (self.since is None or record.started_at >= self.since)
            and (self.until is None or record.started_at < self.until)
        )


TOTAL_FIELDS: Final = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "response_bytes",
)


HOUR_CHARS: Final = len("2026-11-29T12")
"""A stored time's first characters name its hour (times are stored in one fixed width)."""
DAY_CHARS: Final = len("2026-11-29")


def empty_totals() -> dict[str, int]:
    return dict.fromkeys(TOTAL_FIELDS, 0)


def bucketed(hours: list[tuple[str, dict[str, int]]]) -> dict[str, Any]:
    """Totals per hour (``"2026-11-29T12"``), per day and overall from per-hour sums."""
    total = empty_totals()
    days: dict[str, dict[str, int]] = {}
    for hour, sums in hours:
        day = days.setdefault(hour[:DAY_CHARS], empty_totals())
        for name, value in sums.items():
            total[name] += value
            day[name] += value
    return {
        **total,
        "hours": [{"hour": hour + ":00:00Z", **sums} for hour, sums in hours],
        "days": [{"day": day, **sums} for day, sums in days.items()],
    }


def told_usage(
    prompt_tokens: int,
    completion_tokens: int,
    remaining: Mapping[str, Any],
    windows: Mapping[str, Any],
) -> dict[str, Any]:
    """What the grantor tells the requester at the end of an answer: its counts, and what
    the grant has left (its allowances and its windows) once they are settled."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "remaining": dict(remaining),
        "windows": dict(windows),
    }


def parse_told(value: object) -> tuple[int, int] | None:
    """The counts a grantor told, if well formed."""
    if not isinstance(value, dict):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (prompt, completion)
    ):
        return None
    assert isinstance(prompt, int)
    assert isinstance(completion, int)
    return prompt, completion
