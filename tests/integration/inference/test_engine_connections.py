"""The engine client keeps a connection only while every answer on it ends cleanly.

A new connection per request cost the grantor more CPU than relaying a short answer; but
llama.cpp's server can leave a connection dead after a failed stream, so a failed answer the
engine finished never leaves its connection for the next request, and a cancelled stream still
closes its connection (the engine stops generating).
"""

from __future__ import annotations

import pytest
from tests.support.engine_connections import scripted_engine

from ficc.adapters.engine_client import EngineClient
from ficc.base.errors import FiccError, Unavailable

CHAT = "/v1/chat/completions"


def _body(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


async def _chat(client: EngineClient, model: str) -> list[str]:
    async with await client.open_stream(CHAT, _body(model)) as stream:
        return [event.data async for event in stream]


async def test_clean_streams_share_one_connection() -> None:
    async with scripted_engine() as engine, EngineClient(engine.url) as client:
        for _ in range(5):
            events = await _chat(client, "clean")
            assert events[-1] == "[DONE]"
        assert engine.requests == 5
        assert engine.opened == 1
    assert engine.closed_by_client == 1


@pytest.mark.parametrize(("answer", "error"), [("unfinished", Unavailable), ("refused", FiccError)])
async def test_a_failed_answer_the_engine_finished_never_carries_the_next_request(
    answer: str, error: type[FiccError]
) -> None:
    async with scripted_engine() as engine, EngineClient(engine.url) as client:
        await _chat(client, "clean")
        with pytest.raises(error):
            await _chat(client, answer)
        # The connection the failure left open is closed, not kept for the next request.
        await engine.wait_closed_by_client(1)
        assert (await _chat(client, "clean"))[-1] == "[DONE]"
        assert await _chat(client, "clean")
        assert engine.opened == 2
        assert engine.requests == 4


async def test_a_stream_closed_mid_way_closes_its_connection() -> None:
    async with scripted_engine() as engine, EngineClient(engine.url) as client:
        await _chat(client, "clean")
        stream = await client.open_stream(CHAT, _body("endless"))
        events = aiter(stream)
        assert (await anext(events)).data.startswith("{")
        await stream.aclose()
        # The engine sees its client leave (so it stops generating) while the client lives.
        await engine.wait_closed_by_client(1)
        assert (await _chat(client, "clean"))[-1] == "[DONE]"
        assert engine.opened == 2
