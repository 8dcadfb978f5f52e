"""The engine client keeps a connection only while every answer on it ends cleanly.

A new connection per request cost the grantor more CPU than relaying a short answer; but
llama.cpp's server can leave a connection dead after a failed stream, so a failed answer the
engine finished never leaves its connection for the next request, and a cancelled stream still
closes its connection (the engine stops generating).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.engine_connections import RESPONSE, scripted_engine

from ficc.adapters.engines.client import COMPLETIONS, EngineClient
from ficc.adapters.engines.transport import KEEPALIVE_CONNECTIONS, EngineTimeout
from ficc.adapters.runtimes import LlamaCppRuntime
from ficc.base.errors import ContextLengthExceeded, EngineUnavailable, FiccError
from ficc.domain.openai_responses import RESPONSES_PATH
from ficc.services.ports.runtimes import LaunchRequest, NodeInfo

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


@pytest.mark.parametrize(
    ("answer", "error"), [("unfinished", EngineUnavailable), ("refused", FiccError)]
)
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
        assert engine.sent_after_failure == 0


async def test_an_engine_that_never_reads_the_request_fails_it_within_the_write_timeout() -> None:
    accepted, done = asyncio.Event(), asyncio.Event()

    async def never_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()  # nothing is read: the client's writes fill the buffers
        await done.wait()
        writer.close()

    server = await asyncio.start_server(never_read, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    body = {"messages": [{"role": "user", "content": "x" * (32 * 2**20)}]}
    timeout = EngineTimeout(connect=5.0, read=300.0, write=0.2, pool=5.0)
    async with server, EngineClient(f"http://127.0.0.1:{port}", timeout=timeout) as client:
        with pytest.raises(EngineUnavailable, match="did not answer in time"):
            await client.open_stream(CHAT, body)
        assert accepted.is_set()
        done.set()


async def test_an_engine_nobody_listens_for_cannot_be_reached() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with EngineClient(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(EngineUnavailable, match="cannot be reached"):
            await client.open_stream(CHAT, _body("clean"))
        with pytest.raises(EngineUnavailable, match="cannot be reached"):
            await client.list_models()


async def test_at_most_the_keep_alive_bound_of_idle_connections_is_kept() -> None:
    async with scripted_engine() as engine, EngineClient(engine.url) as client:
        streams = [
            await client.open_stream(CHAT, _body("clean")) for _ in range(KEEPALIVE_CONNECTIONS + 1)
        ]
        for stream in streams:
            async with stream:
                assert [event.data async for event in stream][-1] == "[DONE]"
        # One connection more than the bound came back idle: the client closed it.
        await engine.wait_closed_by_client(1)
        for _ in range(KEEPALIVE_CONNECTIONS):
            await _chat(client, "clean")
        assert engine.opened == KEEPALIVE_CONNECTIONS + 1
        assert engine.closed_by_client == 1


async def test_a_stream_that_ended_empty_is_asked_why_on_another_connection() -> None:
    """llama.cpp's server refuses a prompt past the context only to a plain request, after an
    empty stream that can leave its connection dead: the question goes on a fresh one."""
    async with scripted_engine() as engine, EngineClient(engine.url) as client:
        await _chat(client, "clean")
        with pytest.raises(ContextLengthExceeded):
            await _chat(client, "empty")
        assert (await _chat(client, "clean"))[-1] == "[DONE]"
        assert engine.requests == 4
        assert engine.sent_after_failure == 0


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


async def test_a_responses_stream_ends_at_its_last_typed_event_and_keeps_its_connection() -> None:
    """vLLM's Responses API sends no ``[DONE]``: its ``response.completed`` ends the stream
    (not "ended before it was complete"), and a plain answer is the response it carries."""
    body = {"model": "responses", "input": "Hi"}
    async with scripted_engine() as engine, EngineClient(engine.url) as client:
        async with await client.open_stream(RESPONSES_PATH, body) as stream:
            events = [event async for event in stream]
        assert [(event.event, event.done) for event in events] == [
            ("response.created", False),
            ("response.completed", True),
        ]
        assert await client.complete(RESPONSES_PATH, body) == RESPONSE
        assert engine.requests == 2
        assert engine.opened == 1


@pytest.mark.engine
async def test_llama_cpp_answers_on_kept_connections_after_failed_streams(
    tmp_path: Path, tiny_model_file: Path
) -> None:
    """llama.cpp's server itself, with streams that fail (a prompt past the context, a stream
    closed mid-way) between clean ones: every clean one is answered."""
    runtime = LlamaCppRuntime(log_dir=tmp_path / "logs")
    request = LaunchRequest(
        attempt_id="att_" + "k" * 26,
        node=NodeInfo(node_id="nod_" + "k" * 26, local=True, gpu_count=0),
        model_name="svc-keep",
        options={"n_threads": 1},
        model_path=tiny_model_file,
    )
    try:
        handle = await runtime.launch(request)
        assert (await runtime.wait_ready(handle, 60.0)).healthy
        async with EngineClient(
            handle.base_url, model=handle.model_name, api_key=runtime.api_key(handle)
        ) as client:
            failures = 0
            for _ in range(3):
                assert (await _chat(client, "any"))[-1] == "[DONE]"
                with pytest.raises(ContextLengthExceeded):
                    await client.complete(COMPLETIONS, {"prompt": "x " * 3000, "max_tokens": 4})
                failures += 1
                stream = await client.open_stream(CHAT, {**_body("any"), "max_tokens": 64})
                await anext(aiter(stream))
                await stream.aclose()
                assert (await _chat(client, "any"))[-1] == "[DONE]"
        assert failures == 3
    finally:
        await runtime.stop_all(5.0)
