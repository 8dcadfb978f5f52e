"""What a response writes in one step of the loop reaches the socket as one write.

Driven through uvicorn's own HTTP protocol (the one ``ficc serve`` uses) over a transport that
records its writes: a plain answer is one write, not its head and body apart; a stream sends
its head with its first piece and its terminator with its last.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from ficc.cli.http_protocol import CoalescedHTTPProtocol, CoalescingTransport
from ficc.web.sse import EventStreamResponse

REQUEST = b"GET / HTTP/1.1\r\nhost: ficc\r\n\r\n"


class RecordingTransport:
    """A socket transport that keeps each write it is given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.ended = asyncio.Event()
        """Set by a write that ends a response (its last bytes, or a chunked terminator)."""

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        if self.writes[-1].endswith((b"0\r\n\r\n", b"plain")):
            self.ended.set()

    def writelines(self, pieces: Iterable[bytes]) -> None:
        self.write(b"".join(pieces))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}
        return addresses.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def served(app: Any) -> list[bytes]:
    """The writes one GET to ``app`` makes, once its response is complete."""
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
    config.load()
    protocol = CoalescedHTTPProtocol(config=config, server_state=ServerState(), app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(REQUEST)
    async with asyncio.timeout(5):
        await transport.ended.wait()
    protocol.connection_lost(None)
    return transport.writes


async def test_writes_of_one_step_go_as_one_and_a_later_one_apart() -> None:
    transport = RecordingTransport()
    coalescing = CoalescingTransport(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    coalescing.write(b"head ")
    coalescing.write(b"body")
    assert transport.writes == []  # nothing goes before the step ends
    await asyncio.sleep(0)
    coalescing.write(b"later")
    await asyncio.sleep(0)
    assert transport.writes == [b"head body", b"later"]


async def test_closing_writes_what_waits_first_and_a_closed_transport_drops_it() -> None:
    transport = RecordingTransport()
    coalescing = CoalescingTransport(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    coalescing.write(b"last words")
    coalescing.close()
    assert (transport.writes, transport.closed) == ([b"last words"], True)
    coalescing.write(b"too late")
    await asyncio.sleep(0)
    assert transport.writes == [b"last words"]


async def test_a_plain_answer_is_one_write() -> None:
    async def plain(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"plain"})

    writes = await served(plain)
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert writes[0].endswith(b"\r\n\r\nplain")


async def test_a_stream_sends_its_head_with_its_first_piece_and_its_end_with_its_last() -> None:
    later = asyncio.Event()

    async def pieces() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        await later.wait()  # the engine is slower than the caller here
        yield b"data: last\n\n"

    async def closed() -> None:
        pass

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        asyncio.get_running_loop().call_later(0.01, later.set)
        await EventStreamResponse(pieces(), closed)(scope, receive, send)

    writes = await served(app)
    assert len(writes) == 2, writes
    head, _, first = writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"text/event-stream" in head
    assert first == b"d\r\ndata: first\n\n\r\n"
    assert writes[1] == b"c\r\ndata: last\n\n\r\n0\r\n\r\n"
