"""Sending our requests: one exchange per request, on a stream of the session.

An exchange has the caller's deadline (over the whole answer, or per message for a stream),
and cleans up on every exit: an answered stream is kept for the next request, an unanswered
one is cancelled and reset. What the peer may send back is the connection's rule.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ficc.adapters import metrics
from ficc.adapters.hypernet.accounting import counted
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.logs import current_request_id
from ficc.base.errors import (
    FiccError,
    OutcomeUnknown,
    ProtocolError,
    Unavailable,
    error_from_code,
)
from ficc.protocol.answers import parse_large_answer
from ficc.protocol.events import (
    AnswerEnded,
    AnswerReceived,
    DataReceived,
    ErrorReceived,
    Event,
    LargeAnswerReceived,
    StreamEnded,
)

if TYPE_CHECKING:
    from ficc.adapters.hypernet.session import PeerSession


class Exchange:
    """One request on one stream, with its deadline and its cleanup on every exit path."""

    def __init__(
        self,
        session: PeerSession,
        operation: str,
        body: dict[str, Any],
        *,
        streaming: bool,
        max_answer_bytes: int | None = None,
    ) -> None:
        self._session = session
        self._max_answer_bytes = max_answer_bytes
        self.label = metrics.operation_label(operation)
        self._operation = operation
        self._body = body
        self._streaming = streaming
        self._stream_id = 0
        self._stream: FrameStream | None = None
        self._events: deque[Event] = deque()
        self._sent = False
        self._complete = False
        self._timeout = 0.0
        self._per_message = False

    async def answer(self, timeout_seconds: float) -> dict[str, Any]:
        """Send the request and return its JSON answer."""
        with counted("out", self.label):
            async with self.running(timeout_seconds):
                await self.send()
                event = await self.next_event()
                if isinstance(event, AnswerReceived):
                    self._complete = True
                    return event.body
                if isinstance(event, LargeAnswerReceived):
                    # Decoded in a worker thread, gradually: the loop serves everyone else.
                    body = await asyncio.to_thread(parse_large_answer, event.data)
                    self._complete = True
                    return body
                raise self.unexpected(event)
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def running(
        self, timeout_seconds: float, *, per_message: bool = False
    ) -> AsyncIterator[None]:
        """The exchange's deadline and cleanup around sending and reading it."""
        session = self._session
        self._timeout = timeout_seconds
        self._per_message = per_message
        try:
            async with asyncio.timeout(None if per_message else timeout_seconds):
                async with session.slots:
                    self._stream_id, self._stream = await session.take_stream()
                    yield
        except TimeoutError as exc:
            raise self._lost(f"no answer from the peer within {timeout_seconds} s") from exc
        except (Unavailable, OutcomeUnknown) as exc:
            if self._sent and not self._complete and isinstance(exc, Unavailable):
                raise self._lost(exc.message) from exc
            raise
        except ProtocolError as exc:
            if not self._complete:
                await session.fail(self._stream, exc)
            raise
        finally:
            if self._stream is not None:
                if self._complete:
                    session.return_stream(self._stream_id)
                else:
                    session.abandon(self._stream_id, cancelled=self._sent)

    def _lost(self, why: str) -> FiccError:
        """Sent but unanswered: unknown (the service that built the request names what is in
        doubt); never sent: unavailable, and certainly nothing happened."""
        if not self._sent:
            return Unavailable(f"the request was not sent: {why}")
        return OutcomeUnknown(f"the outcome of {self._operation} is unknown: {why}")

    async def send(self) -> None:
        """The request in one frame; a body too large for it follows as chunks and an end."""
        assert self._stream is not None
        frames = self._session.protocol.send_request(
            self._stream_id,
            self._operation,
            self._body,
            current_request_id.get(),
            streaming=self._streaming,
            max_answer_bytes=self._max_answer_bytes,
        )
        self._sent = True
        await self._stream.write(frames)

    async def next_event(self) -> Event:
        """What the peer's next bytes on the stream come to."""
        assert self._stream is not None
        session = self._session
        while not self._events:
            if self._per_message:
                async with asyncio.timeout(self._timeout):
                    data = await session.read(self._stream_id, self._stream)
            else:
                data = await session.read(self._stream_id, self._stream)
            self._events.extend(
                session.protocol.receive(self._stream_id, data, session.loop.time())
            )
        return self._events.popleft()

    def complete(self) -> None:
        """The answer is whole: the stream may carry the next request."""
        self._complete = True

    def unexpected(self, event: Event) -> FiccError:
        """The error for an event that does not answer a request of this kind."""
        if isinstance(event, ErrorReceived):
            self._complete = True
            return error_from_code(event.error.code, event.error.message, event.error.details)
        if isinstance(event, StreamEnded):
            return Unavailable("the peer ended the request's stream without an answer")
        return ProtocolError(f"unexpected {type(event).__name__} in answer to a request")


@asynccontextmanager
async def stream_answer(
    exchange: Exchange, timeout_seconds: float
) -> AsyncIterator[AsyncIterator[bytes]]:
    """Send the request and iterate the chunks of its streamed answer."""
    transfer = metrics.is_transfer(exchange.label)
    with counted("out", exchange.label):
        async with exchange.running(timeout_seconds, per_message=True):
            await exchange.send()
            first = await exchange.next_event()
            if not isinstance(first, DataReceived | AnswerEnded):
                raise exchange.unexpected(first)

            async def chunks() -> AsyncGenerator[bytes, None]:
                event: Event = first
                while isinstance(event, DataReceived):
                    if transfer:
                        metrics.TRANSFER_BYTES.labels(direction="in").inc(len(event.data))
                    yield event.data
                    event = await exchange.next_event()
                if not isinstance(event, AnswerEnded):
                    raise exchange.unexpected(event)
                exchange.complete()

            iterator = chunks()
            async with contextlib.aclosing(iterator):
                yield iterator
