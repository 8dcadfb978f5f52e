"""One request stream of a connection: its decoder, its state in the table, its clocks.

The serving side verifies each request (signature, session, order) and gathers a body that
follows it; the requesting side gathers a JSON answer that comes as chunks, and checks the
``End`` total of every chunked answer. A JSON answer larger than the request's
``max_answer_bytes`` fails the stream (not the connection) as soon as it passes the bound,
before it is decoded or gathered further.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from ficc.base.errors import PeerUnreachable, ProtocolError, TooLarge
from ficc.protocol.answers import (
    MAX_JSON_ANSWER_BYTES,
    AssemblyRoom,
    BodyAssembly,
    LargeBody,
    gather_answer,
    parse_answer,
)
from ficc.protocol.chunk_frames import decode_message_parts
from ficc.protocol.events import (
    AnswerEnded,
    AnswerReceived,
    DataReceived,
    ErrorReceived,
    Event,
    LargeAnswerReceived,
    LargeBodyReceived,
    RequestCancelled,
    RequestReceived,
    RequestRefused,
    StreamEnded,
)
from ficc.protocol.frames import FrameDecoder
from ficc.protocol.limits import FRAME_OVERHEAD, MIN_READ_BYTES, OFF_LOOP_JSON_BYTES
from ficc.protocol.messages import Cancel, Chunk, End, Error, Message, Request, Response, Tag
from ficc.protocol.requests import RequestVerifier
from ficc.protocol.stream_states import TERMINAL, Side, StreamState, after_receiving

_RESPONSE_TAG: Final = bytes([Tag.RESPONSE])


def message_kind(message: Message) -> str:
    """The name the state table knows ``message`` by."""
    if isinstance(message, Request):
        return "request" if message.following is None else "request_with_body"
    return type(message).__name__.lower()


@dataclass
class RequestStream:
    """What one stream has received, and where it stands."""

    stream_id: int
    side: Side
    state: StreamState
    verifier: RequestVerifier | None = None
    room: AssemblyRoom | None = None
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    frame_started_at: float | None = None
    """When the frame under way began arriving (``None``: no frame under way)."""
    waiting_since: float | None = None
    """When the serving side began waiting for the next request (``None``: not waiting)."""
    previous_seq: int = 0
    body: BodyAssembly | None = None
    parts: list[bytes] = field(default_factory=list)
    total_bytes: int = 0
    read_bytes: int = MIN_READ_BYTES
    max_answer_bytes: int = MAX_JSON_ANSWER_BYTES
    """Requesting: the largest JSON answer the request in flight may have."""
    held: BodyAssembly | None = None
    """Serving: a large body handed over to be completed; its room is held until the next
    request on the stream, or the stream's end."""

    def feed(self, data: bytes, now: float) -> list[Event]:
        """Received bytes (``b""``: the peer's clean end) to the events they complete."""
        if not data:
            if self.decoder.buffered_bytes:
                raise ProtocolError("the peer ended a stream in the middle of a frame")
            self.state = after_receiving(self.side, self.state, "eof")
            if self.state is StreamState.CANCELLED:
                return [RequestCancelled(self.stream_id)]
            return [StreamEnded(self.stream_id)]
        completed = self.decoder.feed_parts(data)
        if not self.decoder.buffered_bytes:
            self.frame_started_at = None
        elif completed or self.frame_started_at is None:
            self.frame_started_at = now
        events: list[Event] = []
        for parts in completed:
            size = sum(map(len, parts))
            self.read_bytes = max(MIN_READ_BYTES, size + FRAME_OVERHEAD)
            if self.side is Side.REQUESTING and bytes(parts[0][:1]) == _RESPONSE_TAG:
                self._check_answer_size(size - 1)  # before its JSON is decoded
            message = decode_message_parts(parts)
            before = self.state
            self.state = after_receiving(self.side, before, message_kind(message))
            if self.side is Side.SERVING:
                events.extend(self._serving(message, now))
            else:
                events.extend(self._requesting(before, message))
            if self.state in TERMINAL:
                break
        return events

    def _serving(self, message: Message, now: float) -> list[Event]:
        if isinstance(message, Cancel):
            if self.state is StreamState.IDLE:
                self.waiting_since = now
                return []
            return [RequestCancelled(self.stream_id)]
        if isinstance(message, Request):
            assert self.verifier is not None
            self.verifier.verify(message, previous_on_stream=self.previous_seq)
            self.previous_seq = message.seq
            self._release_held()
            if message.following is not None:
                assert self.room is not None
                self.body = self.room.begin(message)
                self.waiting_since = now
                return []
            self.waiting_since = None
            return [RequestReceived(self.stream_id, message)]
        assert self.body is not None
        assert isinstance(message, Chunk | End)
        assembly = self.body
        request = assembly.add(message)
        if request is None:
            self.waiting_since = now
            return []
        self.body = None
        self.waiting_since = None
        if isinstance(request, TooLarge):
            return [RequestRefused(self.stream_id, assembly.request, request)]
        if isinstance(request, LargeBody):
            self.held = assembly
            return [LargeBodyReceived(self.stream_id, request.request, request.data)]
        return [RequestReceived(self.stream_id, request)]

    def _requesting(self, before: StreamState, message: Message) -> list[Event]:
        if isinstance(message, Error):  # the answer ends here: the next one counts afresh
            self.parts.clear()
            self.total_bytes = 0
            return [ErrorReceived(self.stream_id, message)]
        if isinstance(message, Response):
            return [AnswerReceived(self.stream_id, message.body)]
        gathering = before in (StreamState.AWAITING, StreamState.GATHERING)
        if isinstance(message, Chunk):
            self.total_bytes += len(message.data)
            if not gathering:
                return [DataReceived(self.stream_id, message.data)]
            self._check_answer_size(self.total_bytes)
            gather_answer(self.parts, self.total_bytes, message.data)
            return []
        assert isinstance(message, End)
        if message.total_bytes != self.total_bytes:
            raise ProtocolError(
                f"the answer ended at {self.total_bytes} bytes, the peer says {message.total_bytes}"
            )
        self.total_bytes = 0
        if not gathering:
            return [AnswerEnded(self.stream_id)]
        if sum(map(len, self.parts)) > OFF_LOOP_JSON_BYTES:
            data = b"".join(self.parts)
            self.parts.clear()
            return [LargeAnswerReceived(self.stream_id, data)]
        body = parse_answer(self.parts)
        self.parts.clear()
        return [AnswerReceived(self.stream_id, body)]

    def _check_answer_size(self, size: int) -> None:
        """Fail the stream once a JSON answer passes what its request may be answered with."""
        if size > self.max_answer_bytes:
            self.parts.clear()
            raise PeerUnreachable(
                f"the peer's answer passed {self.max_answer_bytes} bytes, the most this "
                "request may be answered with",
                details={"limit": "answer_bytes", "allowed": self.max_answer_bytes},
            )

    def _release_held(self) -> None:
        if self.held is not None:
            self.held.abandon()
            self.held = None

    def read_deadline(self, limit_seconds: float) -> float | None:
        """When more must have arrived: the frame under way, or the next request."""
        starts = [t for t in (self.frame_started_at, self.waiting_since) if t is not None]
        return min(starts) + limit_seconds if starts else None

    def frame_is_late(self) -> bool:
        """Whether the frame under way, rather than the next request, set the deadline."""
        started = self.frame_started_at
        return started is not None and (self.waiting_since is None or started <= self.waiting_since)

    def forget(self) -> None:
        """The stream is gone: give back the room of a body it was gathering."""
        if self.body is not None:
            self.body.abandon()
            self.body = None
        self._release_held()
        self.state = StreamState.FAILED if self.state not in TERMINAL else self.state
