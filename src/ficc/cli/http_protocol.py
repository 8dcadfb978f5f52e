"""Uvicorn's HTTP protocol with one socket write for what a response writes in one step.

Uvicorn writes a response's status line and headers, each piece of its body and a chunked
body's terminator with a write each, and a write to a loopback socket is a system call that
also runs the reader's side of TCP. A plain answer is two writes, a two-piece stream four.
Here the writes made in one step of the event loop go out together at the end of the step
(``loop.call_soon``): a plain answer, its head and body, becomes one write; a stream whose
pieces were already received when it starts or ends (:class:`~ficc.web.sse.EventStreamResponse`
sends its head with the first piece and the terminator with the last) gains the same. Nothing
waits longer than the step that wrote it, so the first byte of a stream is not delayed.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.auto import AutoHTTPProtocol


class CoalescingTransport:
    """A socket transport whose writes of one loop step are joined into one write.

    Everything else (closing, flow control, the connection's addresses) is the transport's
    own; closing writes what waits first, as a transport's close sends what it buffered.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._waiting: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._waiting:
            self._loop.call_soon(self.flush)
        self._waiting.append(bytes(data) if not isinstance(data, bytes) else data)

    def flush(self) -> None:
        """Write what waits, as one piece (a closed connection drops it, as its write would)."""
        waiting, self._waiting = self._waiting, []
        if waiting and not self._transport.is_closing():
            if len(waiting) == 1:
                self._transport.write(waiting[0])
            else:
                self._transport.writelines(waiting)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """Uvicorn's HTTP protocol (httptools where installed) over a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, but they are transports.
        coalescing = CoalescingTransport(
            cast(asyncio.Transport, transport), asyncio.get_running_loop()
        )
        super().connection_made(coalescing)
