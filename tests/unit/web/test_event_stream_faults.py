"""A stream that fails by a fault (not a refusal) is not passed off as a whole answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ficc.base.errors import EngineUnavailable
from ficc.web.sse import EventStreamResponse


async def _run(chunks: AsyncIterator[bytes]) -> tuple[list[dict[str, object]], list[str]]:
    sent: list[dict[str, object]] = []
    closed: list[str] = []

    async def receive() -> dict[str, object]:
        import asyncio

        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def close() -> None:
        closed.append("closed")

    response = EventStreamResponse(chunks, close)
    try:
        await response({"type": "http"}, receive, send)  # type: ignore[arg-type]
    finally:
        assert closed == ["closed"]
    return sent, closed


async def test_a_fault_in_the_relay_reaches_the_server_and_the_body_is_not_ended() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        raise KeyError("a bug")

    sent: list[dict[str, object]] = []
    with pytest.raises(KeyError):
        sent, _ = await _run(broken())
    assert not any(m.get("more_body") is False for m in sent)


async def test_a_refusal_ends_the_stream_with_its_error_event_and_a_whole_body() -> None:
    async def refused() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        raise EngineUnavailable("the engine went away")

    sent, _ = await _run(refused())
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert b"engine_unavailable" in b"".join(bodies)  # type: ignore[arg-type]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
