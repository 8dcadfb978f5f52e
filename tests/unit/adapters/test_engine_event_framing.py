"""An engine's events are the same however its body is cut into reads: every line ending
(LF, CRLF, a lone CR, mixed) and a CRLF split between two reads, read by the one-line
event's match or line by line; after ``[DONE]`` only blank lines
leave the connection clean, anything else has it closed; a line past its bound is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ficc.adapters.engines import sse
from ficc.adapters.engines.sse import EngineStream
from ficc.base.errors import EngineUnavailable
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH

BODY = (
    b'data: {"a":1}\r\n\r\nevent: x\rdata: {"b":2}\r\r: note\n'
    b'data: {"c":\ndata: 3}\n\ndata:{"d":4}\r\rdata: {"e":5}\r\r\ndata: {"f":6}\r\n\n'
    b"data: [DONE]\r\n\r\n"
)
EVENTS = ['{"a":1}', '{"b":2}', '{"c":\n3}', '{"d":4}', '{"e":5}', '{"f":6}', "[DONE]"]


class _Body:
    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def aiter_raw(self) -> Any:
        for piece in self._pieces:
            await asyncio.sleep(0)
            yield piece

    async def aclose(self) -> None:
        return None


async def _read(pieces: list[bytes]) -> tuple[list[str], bool]:
    """The events' data, and whether the body ended clean (its connection reusable)."""
    stream = EngineStream(_Body(pieces), CHAT_COMPLETIONS_PATH)  # type: ignore[arg-type]
    events = [event.data async for event in stream]
    return events, stream._clean


async def test_the_events_are_the_same_wherever_the_body_is_cut() -> None:
    for cut in range(1, len(BODY)):
        for second in (cut, min(cut + 7, len(BODY))):
            pieces = [BODY[:cut], BODY[cut:second], BODY[second:]]
            events, clean = await _read([piece for piece in pieces if piece])
            assert events == EVENTS, (cut, second)
            assert clean, (cut, second)


async def test_anything_but_blank_lines_after_done_closes_the_connection() -> None:
    events, clean = await _read([b"data: {}\n\ndata: [DONE]\n\n", b"\r\n", b"data: {}\n\n"])
    assert events == ["{}", "[DONE]"]
    assert not clean


async def test_a_stream_ended_before_done_is_refused() -> None:
    with pytest.raises(EngineUnavailable, match="before it was complete"):
        await _read([b"data: {}\n\ndata: {}"])


async def test_a_line_past_its_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_LINE_BYTES", 64)
    with pytest.raises(EngineUnavailable, match="line longer"):
        await _read([b"data: {}\n\n", b"data: " + b"x" * 100])
