"""A scripted OpenAI-compatible engine on loopback that counts its connections, for the
engine client's keep-alive tests: each request's ``model`` names how it is answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

CHUNK = {"id": "c-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
EVENT = json.dumps({**CHUNK, "choices": [{"index": 0, "delta": {"content": "hi"}}]})


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


ANSWERS: dict[str, bytes] = {
    # A whole stream, then HTTP's end of body: the connection is fit for the next request.
    "clean": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
    + _chunked(f"data: {EVENT}\n\n".encode())
    + _chunked(b"data: [DONE]\n\n")
    + b"0\r\n\r\n",
    # A stream the engine ends, cleanly for HTTP, without [DONE]: a failed stream.
    "unfinished": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(f"data: {EVENT}\n\n".encode()) + b"0\r\n\r\n",
    # A refusal whose whole body arrives.
    "refused": b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
    b'Content-Length: 34\r\n\r\n{"error": {"message": "it broke"}}',
    # llama.cpp's server with a prompt past the context: a stream that ends before any event...
    "empty": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # ...and its refusal of the same request made plainly.
    "empty, plain": b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
    b"Content-Length: 87\r\n\r\n"
    b'{"error": {"message": "exceeds the context window", "code": "context_length_exceeded"}}',
}
"""Every answer keeps the connection open, as llama.cpp's server does."""

RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
ANSWERS["responses"] = (
    # vLLM's Responses API: typed events, the last one carrying the response, no [DONE].
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + _chunked(
        b"event: response.created\ndata: "
        + json.dumps({"type": "response.created", "response": RESPONSE}).encode()
        + b"\n\n"
    )
    + _chunked(
        b"event: response.completed\ndata: "
        + json.dumps({"type": "response.completed", "response": RESPONSE}).encode()
        + b"\n\n"
    )
    + b"0\r\n\r\n"
)


@dataclass
class ScriptedEngine:
    """What the engine saw: connections opened, and those its client closed."""

    url: str = ""
    opened: int = 0
    closed_by_client: int = 0
    requests: int = 0
    sent_after_failure: int = 0
    """Requests that came on a connection after a failed answer on it: llama.cpp's server can
    leave such a connection dead, so a client must never send one."""
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_closed_by_client(self, count: int, seconds: float = 5.0) -> None:
        async with asyncio.timeout(seconds), self.changed:
            await self.changed.wait_for(lambda: self.closed_by_client >= count)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        failed = False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if failed:
                    self.sent_after_failure += 1
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length))
                self.requests += 1
                model = body.get("model")
                if model == "endless":
                    # The first event, then nothing until the client goes: a long generation.
                    writer.write(ANSWERS["unfinished"][: -len(b"0\r\n\r\n")])
                    await writer.drain()
                    await reader.read()
                    break
                answer = str(model) if body.get("stream") is not False else f"{model}, plain"
                writer.write(ANSWERS[answer])
                await writer.drain()
                failed = answer in ("unfinished", "refused", "empty")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        async with self.changed:
            self.closed_by_client += 1
            self.changed.notify_all()
        writer.close()


@contextlib.asynccontextmanager
async def scripted_engine() -> AsyncIterator[ScriptedEngine]:
    """The engine; leave the block after closing its client (each connection is awaited)."""
    engine = ScriptedEngine()
    server = await asyncio.start_server(engine.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine.url = f"http://127.0.0.1:{port}"
    async with server:
        yield engine
        # The client was closed first: every connection it opened must be closed by now.
        await engine.wait_closed_by_client(engine.opened)
