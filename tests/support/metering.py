"""Helpers for metered-grant tests on two real clusters: streamed chats through alpha's
federated compatible URL, and the usage each side recorded."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
from tests.support.federation import API, ok
from tests.support.remote import Federated

PLAIN_TEXT = {str(token): -100 for token in range(2, 259)}
"""Bans the tiny model's end token and its byte tokens: a chat runs to max_tokens."""


def new_request_id() -> str:
    return "meter-" + secrets.token_hex(8)


def stream_chat(
    fed: Federated, service: str, *, max_tokens: int, request_id: str
) -> tuple[int, str]:
    """One streamed chat through alpha: its status and body (the whole stream)."""
    body = {
        "model": service,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "logit_bias": PLAIN_TEXT,
        "stream": True,
    }
    client = fed.alpha.owner()
    with client.stream(
        "POST",
        f"{fed.federated_base_url.removeprefix(fed.alpha.url)}/chat/completions",
        json=body,
        headers={"X-Request-ID": request_id},
        timeout=120,
    ) as response:
        text = "".join(response.iter_text())
        return response.status_code, text


@contextmanager
def long_stream(fed: Federated, request_id: str) -> Iterator[httpx.Response]:
    """A streamed chat through alpha asking for 3000 tokens, far more than a test reads."""
    body = {
        "model": fed.service,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 3000,
        "logit_bias": PLAIN_TEXT,
        "stream": True,
    }
    with fed.alpha.owner().stream(
        "POST",
        f"{fed.federated_base_url.removeprefix(fed.alpha.url)}/chat/completions",
        json=body,
        headers={"X-Request-ID": request_id},
    ) as response:
        yield response


def revoked_stream(fed: Federated, grant: str, request_id: str) -> str:
    """A long stream through ``grant``, revoked by beta once its first event came: the rest
    of it as alpha's caller read it."""
    with long_stream(fed, request_id) as response:
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
        return "\n".join(lines)


def concurrent_streams(
    fed: Federated, service: str, count: int, *, max_tokens: int
) -> list[tuple[str, int, str]]:
    """``count`` streamed chats at once: (request ID, status, body) of each."""
    ids = [new_request_id() for _ in range(count)]
    with ThreadPoolExecutor(count) as pool:
        done = list(
            pool.map(
                lambda rid: stream_chat(fed, service, max_tokens=max_tokens, request_id=rid), ids
            )
        )
    return [(rid, status, text) for rid, (status, text) in zip(ids, done, strict=True)]


def usage(client: httpx.Client, grant: str) -> dict[str, Any]:
    """Every usage record of ``grant`` on one side, and its totals."""
    records: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after is not None:
            params["after"] = after
        page = ok(client.get(f"{API}/grants/{grant}/usage", params=params))
        records.extend(page["records"])
        after = page["next"]
        if after is None:
            return {**page, "records": records}


SHARED: tuple[str, ...] = (
    "request",
    "grant",
    "operation",
    "service",
    "prompt_tokens",
    "completion_tokens",
    "request_bytes",
    "outcome",
)
"""What both sides know of a request (times and the answer's bytes are each side's own)."""


def by_request(records: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {r["request"]: tuple(r[k] for k in SHARED) for r in records}


def agree(grantor: list[dict[str, Any]], requester: list[dict[str, Any]]) -> None:
    """Both sides recorded the same requests alike: every shared field, the token counts
    wherever the grantor could tell them (an answer ended early tells none: there the
    requester counted at most what the grantor did)."""
    mine = {r["request"]: r for r in grantor}
    theirs = {r["request"]: r for r in requester}
    assert set(mine) == set(theirs)
    for request, row in theirs.items():
        told = row["told"]
        fields = SHARED if told else tuple(k for k in SHARED if not k.endswith("_tokens"))
        theirs_shown = {k: row[k] for k in fields}
        assert theirs_shown == {k: mine[request][k] for k in fields}, (request, row, mine[request])
        if not told:
            counted = row["counted"]["completion_tokens"] or 0
            assert counted <= mine[request]["completion_tokens"], request


def settled_sum(records: list[dict[str, Any]]) -> int:
    return sum(int(r["prompt_tokens"]) + int(r["completion_tokens"]) for r in records)
