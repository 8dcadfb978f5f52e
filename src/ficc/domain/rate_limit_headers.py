"""OpenAI's ``x-ratelimit-*`` headers for a federated answer: from a grant's terms (the
requester's copy) and what the grantor last told of its allowances and windows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def duration_text(seconds: float) -> str:
    """A wait as OpenAI's rate-limit headers spell it: ``1m30s``, ``12.5s``, ``0s``."""
    if seconds >= 60:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)}m{round(rest, 3):g}s"
    return f"{round(seconds, 3):g}s"


def _count_of(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _field(value: object, name: str) -> object:
    return value.get(name) if isinstance(value, Mapping) else None


def rate_limit_headers(grant: Mapping[str, Any], told: Mapping[str, Any] | None) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers for an answer under ``grant`` (the requester's copy),
    from what the grantor last told (else the copy's own figures).

    Requests: the per-minute rule where the grant sets one, else the grant's ``requests``;
    remaining is the least either leaves. Tokens (only where the grant limits them): the
    per-minute rule where set, else ``tokens``; remaining is the least any token rule leaves.
    ``x-ratelimit-reset-tokens`` (and ``-requests``) where a window applies.
    """
    source = told if told is not None else grant
    remaining, windows = source.get("remaining"), source.get("windows")
    headers: dict[str, str] = {}
    rpm, requests = _count_of(grant.get("requests_per_minute")), _count_of(grant.get("requests"))
    if rpm is not None or requests is not None:
        headers["x-ratelimit-limit-requests"] = str(rpm if rpm is not None else requests)
        lefts = [_count_of(_field(remaining, "requests"))]
        if rpm is not None:
            window = _field(windows, "requests_per_minute")
            lefts.append(_count_of(_field(window, "remaining")) or (rpm if window is None else 0))
            reset = _field(window, "reset_seconds")
            headers["x-ratelimit-reset-requests"] = duration_text(
                float(reset) if isinstance(reset, int | float) else 0.0
            )
        known = [v for v in lefts if v is not None]
        if known:
            headers["x-ratelimit-remaining-requests"] = str(min(known))
    tpm, tokens = _count_of(grant.get("tokens_per_minute")), _count_of(grant.get("tokens"))
    if tpm is None and tokens is None:
        return headers
    headers["x-ratelimit-limit-tokens"] = str(tpm if tpm is not None else tokens)
    token_lefts: list[int] = []
    if tokens is not None:
        left = _count_of(_field(remaining, "tokens"))
        token_lefts.append(tokens if left is None else left)
    if tpm is not None:
        window = _field(windows, "tokens_per_minute")
        left = _count_of(_field(window, "remaining"))
        token_lefts.append(tpm if left is None else left)
        reset = _field(window, "reset_seconds")
        headers["x-ratelimit-reset-tokens"] = duration_text(
            float(reset) if isinstance(reset, int | float) else 0.0
        )
    headers["x-ratelimit-remaining-tokens"] = str(min(token_lefts))
    return headers


def spent_limit(told: Mapping[str, Any], age_seconds: float) -> str | None:
    """The grant's rule that the grantor's last word says would refuse a request now: a
    budget left at 0 (``tokens``, ``requests``), or a window left at 0 that has not reset
    since (``age_seconds`` ago). None when nothing is known to be spent: a route then tries
    the target, and its grantor decides."""
    remaining, windows = told.get("remaining"), told.get("windows")
    for name in ("tokens", "requests"):
        if _count_of(_field(remaining, name)) == 0:
            return name
    for name in ("tokens_per_minute", "requests_per_minute"):
        window = _field(windows, name)
        reset = _field(window, "reset_seconds")
        if (
            _count_of(_field(window, "remaining")) == 0
            and isinstance(reset, int | float)
            and age_seconds < float(reset)
        ):
            return name
    return None


def header_rule(headers: Mapping[str, str], kind: str) -> tuple[int, int, str | None] | None:
    """The grant's rule for ``kind`` as its headers say it (None where it sets none)."""
    limit, remaining = (
        headers.get(f"x-ratelimit-limit-{kind}"),
        headers.get(f"x-ratelimit-remaining-{kind}"),
    )
    if limit is None or remaining is None or not limit.isdigit() or not remaining.isdigit():
        return None
    return int(limit), int(remaining), headers.get(f"x-ratelimit-reset-{kind}")
