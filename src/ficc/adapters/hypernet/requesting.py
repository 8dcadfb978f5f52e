"""One request of ours on one stream: sending it, and reading what comes back as its answer.

A stream-level helper of :class:`~ficc.adapters.hypernet.shovel.PeerSession`, which takes the
stream, runs the deadline and cleans up; this knows the stream and the connection's rules,
not the session. What the peer may send back is the connection's rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ficc.adapters import metrics
from ficc.adapters.hypernet.deadlines import Deadline
from ficc.adapters.hypernet.streams import FrameStream
from ficc.adapters.logs import current_request_id
from ficc.base.errors import FiccError, PeerUnreachable, ProtocolError, error_from_code
from ficc.protocol.answers import parse_large_answer
from ficc.protocol.connection import PeerConnection
from ficc.protocol.events import (
    AnswerEnded,
    AnswerReceived,
    DataReceived,
    ErrorReceived,
    Event,
    LargeAnswerReceived,
    StreamEnded,
)

Read = Callable[[int, FrameStream], Awaitable[bytes]]
"""``read(stream_id, stream)``: the stream's next bytes, within the connection's deadline."""


@dataclass(eq=False)
class Exchange:
    """What was sent and answered of one request; ``complete`` once its answer is whole.

    ``read`` and ``now`` are the session's; ``message_timeout`` bounds each wait for the
    answer's next bytes (None: no bound of its own)."""

    protocol: PeerConnection
    stream_id: int
    stream: FrameStream
    read: Read
    now: Callable[[], float]
    _: KW_ONLY
    message_timeout: float | None
    sent: bool = field(default=False, init=False)
    complete: bool = field(default=False, init=False)
    """The answer is whole: the stream may carry the next request."""
    _events: list[Event] = field(default_factory=list, init=False)

    async def send(
        self,
        operation: str,
        body: dict[str, Any],
        *,
        streaming: bool,
        max_answer_bytes: int | None = None,
    ) -> None:
        """The request in one frame; a body too large for it follows as chunks and an end."""
        frames = self.protocol.send_request(
            self.stream_id,
            operation,
            body,
            current_request_id.get(),
            streaming=streaming,
            max_answer_bytes=max_answer_bytes,
        )
        self.sent = True
        await self.stream.write(frames)

    async def json_answer(self) -> dict[str, Any]:
        """The JSON answer (a large one decoded in a worker thread: the loop goes on)."""
        event = await self._next_event()
        if isinstance(event, LargeAnswerReceived):
            answer = await asyncio.to_thread(parse_large_answer, event.data)
        elif isinstance(event, AnswerReceived):
            answer = event.body
        else:
            raise self._unexpected(event)
        self.complete = True
        return answer

    async def streamed(self, *, transfer: bool) -> AsyncGenerator[bytes, None]:
        """The chunks of a streamed answer; its first event is read (and an error raised)
        before this returns.

        Chunks that one read brought together go on as one piece (the same bytes, in order):
        when the caller reads slower than the peer sends, each write to it carries all that
        waited, not one chunk. A transfer's chunks stay apart (each is a large frame).
        """
        first = await self._next_event()
        if not isinstance(first, DataReceived | AnswerEnded):
            raise self._unexpected(first)

        async def chunks() -> AsyncGenerator[bytes, None]:
            event: Event = first
            while isinstance(event, DataReceived):
                if transfer:
                    metrics.TRANSFER_BYTES.labels(direction="in").inc(len(event.data))
                    yield event.data
                else:
                    yield self._joined(event.data)
                event = await self._next_event()
            if not isinstance(event, AnswerEnded):
                raise self._unexpected(event)
            self.complete = True

        return chunks()

    def _joined(self, data: bytes) -> bytes:
        """``data`` and the chunks already received after it, up to the next other event."""
        events = self._events
        if not events or not isinstance(events[-1], DataReceived):
            return data
        pieces = [data]
        while events:
            waiting = events[-1]
            if not isinstance(waiting, DataReceived):
                break
            events.pop()
            pieces.append(waiting.data)
        return b"".join(pieces)

    async def _next_event(self) -> Event:
        """What the peer's next bytes on the stream come to."""
        while not self._events:
            with Deadline.after(self.message_timeout):
                data = await self.read(self.stream_id, self.stream)
            self._events = self.protocol.receive(self.stream_id, data, self.now())[::-1]
        return self._events.pop()

    def _unexpected(self, event: Event) -> FiccError:
        """The error for an event that does not answer a request of this kind."""
        if isinstance(event, ErrorReceived):
            self.complete = True
            return error_from_code(event.error.code, event.error.message, event.error.details)
        if isinstance(event, StreamEnded):
            return PeerUnreachable("the peer ended the request's stream without an answer")
        return ProtocolError(f"unexpected {type(event).__name__} in answer to a request")
