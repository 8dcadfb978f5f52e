"""A stream's usage for engines that stream none: its chunks are decoded for the count only
at ``[DONE]`` and only when no usage chunk came (an engine that streams usage costs no
decoding per chunk)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ficc.adapters.engines.sse import EngineStream, SseEvent
from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH

USAGE: dict[str, Any] = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


class _Body:
    """An engine's streamed body as the client reads it: pieces, each one read."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def aiter_raw(self) -> Any:
        for piece in self._pieces:
            await asyncio.sleep(0)
            yield piece

    async def aclose(self) -> None:
        return None


def _event(value: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(value).encode() + b"\n\n"


def _content(text: str) -> bytes:
    return _event(
        {"id": "c1", "created": 1, "model": "m", "choices": [{"delta": {"content": text}}]}
    )


class _Counter:
    def __init__(self) -> None:
        self.given: list[list[dict[str, Any]]] = []

    async def __call__(self, chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
        self.given.append(chunks)
        return dict(USAGE)


async def _read(pieces: list[bytes], counter: _Counter) -> list[SseEvent]:
    stream = EngineStream(_Body(pieces), CHAT_COMPLETIONS_PATH, counter)  # type: ignore[arg-type]
    await stream.start()
    return [event async for event in stream]


async def test_an_engine_that_streams_usage_has_no_chunk_decoded_for_it(
    monkeypatch: Any,
) -> None:
    decoded: list[str] = []
    payload = SseEvent.payload

    def counting(self: SseEvent) -> dict[str, Any]:
        decoded.append(self.data)
        return payload(self)

    monkeypatch.setattr(SseEvent, "payload", counting)
    usage = _event({"id": "c1", "choices": [], "usage": USAGE})
    counter = _Counter()
    events = await _read([_content("a"), _content("b"), usage, b"data: [DONE]\n\n"], counter)
    assert [e.data for e in events][-1] == "[DONE]"
    assert len(events) == 4
    assert counter.given == []
    # Only the usage chunk (named in its text) was decoded, to see it holds a usage.
    assert decoded == [usage.decode().removeprefix("data: ").strip()]


async def test_an_engine_that_streams_none_gets_its_chunks_counted_at_the_end() -> None:
    counter = _Counter()
    events = await _read([_content("a"), _content("b"), b"data: [DONE]\n\n"], counter)
    assert len(counter.given) == 1
    assert [c["choices"][0]["delta"]["content"] for c in counter.given[0]] == ["a", "b"]
    added = events[-2].payload()
    assert added["usage"] == USAGE
    assert added["choices"] == []
    assert added["id"] == "c1"
    assert events[-1].data == "[DONE]"


async def test_a_null_usage_on_each_chunk_is_no_usage() -> None:
    counter = _Counter()
    chunk = {"id": "c1", "choices": [{"delta": {"content": "a"}}], "usage": None}
    events = await _read([_event(chunk), b"data: [DONE]\n\n"], counter)
    assert len(counter.given) == 1
    assert events[-2].payload()["usage"] == USAGE
