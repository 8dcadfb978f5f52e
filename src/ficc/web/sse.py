"""Server-sent events straight from an engine, and plain answers that stop when the caller goes:
:func:`relay` answers either, for every URL that invokes a service or a peer.

Nothing is buffered: each event is sent as it arrives. Whatever ends the response — the last
event, an error, or the caller closing the connection, before the first byte or after it —
closes the engine's stream, so the engine stops generating and the request's slot is freed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ficc.base.errors import FiccError
from ficc.domain.openai_answers import error_event
from ficc.web.responses import FiccJSONResponse

T = TypeVar("T")

CLIENT_CLOSED_REQUEST: Final = 499
"""What a request answers when its caller left before the answer (nginx's code): nobody reads it."""

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
OCTET_HEADERS = [
    (b"content-type", b"application/octet-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


async def wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class CallerWatch:
    """One listener for a request's whole life: the caller leaving cancels the work it guards.

    The work runs in the request's own task, not in one of its own per phase raced against the
    listener (a task, a wait and a gather each time): the listener's callback cancels that task,
    and :meth:`run` tells its own cancel from any other (a server shutting down still unwinds).
    """

    def __init__(self, receive: Receive) -> None:
        self._listen = asyncio.create_task(wait_for_disconnect(receive))
        self._listen.add_done_callback(self._heard)
        self._guarded: asyncio.Task[Any] | None = None
        self._cancelled = False
        self.gone = False
        """The caller left (or its connection failed)."""

    def _heard(self, listen: asyncio.Task[None]) -> None:
        if listen.cancelled():
            return
        listen.exception()  # retrieved: a failed receive counts as the caller gone
        self.gone = True
        if self._guarded is not None and not self._cancelled:
            self._cancelled = True
            self._guarded.cancel()

    async def run(self, work: Awaitable[T]) -> T | None:
        """``work``'s result; None if the caller left first (``work`` is then cancelled)."""
        if self.gone:
            if isinstance(work, Coroutine):
                work.close()
            return None
        task = asyncio.current_task()
        assert task is not None
        self._guarded, self._cancelled = task, False
        try:
            result = await work
        except asyncio.CancelledError:
            if self._cancelled and task.uncancel() == 0:
                return None
            raise
        finally:
            self._guarded = None
        if self._cancelled:
            task.uncancel()  # the work finished regardless; nothing is left to cancel
        return result

    def close(self) -> None:
        """Stop listening (the response is over)."""
        self._listen.remove_done_callback(self._heard)
        self._listen.cancel()


class EventStreamResponse(Response):
    """Relays server-sent events as they come; ``close`` runs on every exit path.

    With ``octets`` the chunks are raw bytes (``application/octet-stream``): an error cannot be
    told in-band there, so the response is cut off unfinished and the caller sees a truncated
    body, never an error line among the bytes.
    """

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
        *,
        octets: bool = False,
        watch: CallerWatch | None = None,
    ) -> None:
        super().__init__(status_code=200)
        self._chunks = chunks
        self._close = close
        self._octets = octets
        self._watch = watch
        """The listener that watched the stream being opened, kept for its relay."""
        self.extra_headers: list[tuple[bytes, bytes]] = []
        """Sent with the stream's own headers (a route's ``x-ficc-route-target``, a federated
        answer's rate limits)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = self._watch if self._watch is not None else CallerWatch(receive)
        try:
            # OSError: the caller is gone; closing (below) is all that is left to do.
            with contextlib.suppress(OSError):
                await watch.run(self._relay(send))
        except FiccError:
            # Raised only by a stream of octets: cut off unfinished. Any other failure is a
            # fault, not a refusal (those end in an error event): the server logs it and cuts
            # the response, rather than the stream ending as if it were whole.
            pass
        finally:
            watch.close()
            await self._close()

    async def _relay(self, send: Send) -> None:
        """The head, the pieces and the end, each sent in the step that has it: a piece
        already received goes with the head before it or the end after it in one write
        (:mod:`ficc.cli.http_protocol`)."""
        headers = [*(OCTET_HEADERS if self._octets else SSE_HEADERS), *self.extra_headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            async for chunk in self._chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except FiccError as exc:
            if self._octets:
                raise
            await send({"type": "http.response.body", "body": error_event(exc), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def add_header(response: Response, name: str, value: str) -> None:
    """One more header on a response :func:`relay` gave, a stream's included."""
    if isinstance(response, EventStreamResponse):
        response.extra_headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    else:
        response.headers[name] = value


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """Run ``work``; if the caller disconnects first, cancel it and return None."""
    watch = CallerWatch(request.receive)
    try:
        return await watch.run(work)
    finally:
        watch.close()


async def open_unless_disconnected(
    request: Request,
    opening: AbstractAsyncContextManager[AsyncIterator[bytes]],
    *,
    octets: bool = False,
) -> EventStreamResponse | None:
    """The response relaying a stream once ``opening`` yields it; None if the caller left first.

    Opening a remote stream waits for its first chunk, which can take long (prompt processing,
    a queue). Until the response starts nothing else notices the caller leaving, so without
    this watch an abandoned request would keep its slot and its engine request on the peer
    until the first byte. The same watch then guards the relay.
    """
    stack = contextlib.AsyncExitStack()
    watch = CallerWatch(request.receive)
    try:
        chunks = await watch.run(stack.enter_async_context(opening))
    except BaseException:
        watch.close()
        raise
    if chunks is None:
        watch.close()
        await stack.aclose()
        return None
    return EventStreamResponse(chunks, stack.aclose, octets=octets, watch=watch)


def add_headers(response: Response, headers: dict[str, str]) -> None:
    """Add ``headers`` to an answer, plain or streamed (a stream sends its own first line)."""
    if isinstance(response, EventStreamResponse):
        response.extra_headers.extend((k.encode(), v.encode()) for k, v in headers.items())
    else:
        response.headers.update(headers)


Opening = AbstractAsyncContextManager[AsyncIterator[bytes]]
"""A stream not yet opened: entering it sends the request, leaving it cancels it."""


async def relay(
    request: Request, call: Opening | Awaitable[Any], *, octets: bool = False
) -> Response:
    """The one stream-or-plain relay: ``call`` is a stream to open, or a plain answer's work.

    Either way the caller leaving cancels it, before the first byte or after; a plain answer
    is sent as compact JSON, a stream as it comes (raw bytes with ``octets``).
    """
    if isinstance(call, AbstractAsyncContextManager):
        opened = await open_unless_disconnected(request, call, octets=octets)
        return Response(status_code=CLIENT_CLOSED_REQUEST) if opened is None else opened
    answer = await unless_disconnected(request, call)
    if answer is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return FiccJSONResponse(answer)
