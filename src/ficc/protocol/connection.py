"""One established ficc.federation/1 connection, sans-IO (in the manner of h11 and aioquic).

Bytes in, events out: the transport hands each stream's received bytes to :meth:`receive`
(``b""`` for a clean end) and writes what the ``send_*`` methods return. No socket, no clock:
``now`` is an argument, and :meth:`read_deadline` and :meth:`next_deadline` say when the
transport should wake. The connection owns every rule a peer must keep: the per-stream state
table (:mod:`ficc.protocol.stream_states`), request signatures and their order, heartbeats,
the caps on streams and unfinished frame bytes, the frame and next-request deadlines, the body
that follows a large request (within :attr:`PeerConnection.max_body_bytes`), the size of each
JSON answer (within what :meth:`PeerConnection.send_request` was told), and the ``End``
total. A :class:`ProtocolError` is terminal.
"""

from __future__ import annotations

from typing import Any

from ficc.base.errors import FiccError, LocalProtocolError, PeerUnreachable, ProtocolError
from ficc.protocol.answers import (
    MAX_JSON_ANSWER_BYTES,
    AssemblyRoom,
    encode_answer,
)
from ficc.protocol.chunk_frames import decode_message_parts, encode_chunk_frames
from ficc.protocol.events import (
    Event,
    PeerClosed,
)
from ficc.protocol.frames import FrameDecoder, encode_frame
from ficc.protocol.handshake import Role, Session
from ficc.protocol.limits import (
    MAX_BUFFERED_BYTES,
    MAX_IDLE_STREAMS,
    MAX_PEER_STREAMS,
    MAX_UNPAIRED_ANSWER_BYTES,
    MAX_UNPAIRED_BUFFERED_BYTES,
    MAX_UNPAIRED_STREAMS,
    MIN_READ_BYTES,
    STREAM_CREDIT_MARGIN,
    SessionLimits,
)
from ficc.protocol.liveness import Liveness
from ficc.protocol.messages import Cancel, End, Error, Heartbeat, encode_message
from ficc.protocol.read_budget import ReadBudget
from ficc.protocol.request_stream import RequestStream
from ficc.protocol.requests import RequestSigner, RequestVerifier
from ficc.protocol.signing import Signer, Verify
from ficc.protocol.stream_states import (
    TERMINAL,
    Side,
    StreamState,
    after_sending,
)


class PeerConnection:
    """The protocol state of one connection; the transport only moves bytes and runs timers."""

    def __init__(
        self,
        session: Session,
        signer: Signer,
        verify: Verify,
        now: float,
        *,
        limits: SessionLimits | None = None,
    ) -> None:
        self.session = session
        self.limits = limits or SessionLimits()
        self.paired = session.generation != 0
        self.incoming = session.role is Role.RESPONDER
        self.max_streams = MAX_PEER_STREAMS if self.paired else MAX_UNPAIRED_STREAMS
        self._signer = RequestSigner(session, signer)
        self._verifier = RequestVerifier(session, verify)
        self._liveness = Liveness(now)
        self._budget = ReadBudget(
            MAX_BUFFERED_BYTES if self.paired else MAX_UNPAIRED_BUFFERED_BYTES
        )
        self._assembly_room = AssemblyRoom(paired=self.paired)
        self._streams: dict[int, RequestStream] = {}
        self._idle: list[tuple[int, float]] = []
        self._next_id = 1
        self._control = FrameDecoder()
        self._failed: ProtocolError | None = None
        # Our own unpaired sessions idle out first, so we never reuse one the peer is closing.
        idle = self.limits.unpaired_idle_seconds
        self._idle_limit = None if self.paired else (idle if self.incoming else idle * 2 / 3)
        self._busy = 0
        self._last_busy = now

    @property
    def max_body_bytes(self) -> int:
        """The largest request body the peer may send after a request now; one announced
        larger is answered ``too_large`` and its chunks dropped. The transport sets it from
        the peer's grants before handing over received bytes."""
        return self._assembly_room.max_body_bytes

    @max_body_bytes.setter
    def max_body_bytes(self, value: int) -> None:
        self._assembly_room.max_body_bytes = value

    # -- streams ----------------------------------------------------------------------------

    @property
    def serving_streams(self) -> int:
        """Incoming request streams open now."""
        return sum(1 for s in self._streams.values() if s.side is Side.SERVING)

    @property
    def stream_credit(self) -> int:
        """The concurrent bi-streams the transport lets the peer open: the request streams
        of the cap, the control stream when the peer opened it (we are the responder), and
        :data:`STREAM_CREDIT_MARGIN` to be reset at once rather than wait."""
        return self.max_streams + (1 if self.incoming else 0) + STREAM_CREDIT_MARGIN

    def accept_stream(self, now: float) -> int | None:
        """A stream the peer opened; ``None`` past the cap (reset it: QUIC cannot refuse it)."""
        if self.serving_streams >= self.max_streams:
            return None
        stream_id = self._add(Side.SERVING)
        self._streams[stream_id].waiting_since = now
        return stream_id

    def open_stream(self) -> int:
        """A stream we opened to send a request on."""
        return self._add(Side.REQUESTING)

    def take_idle_stream(self, now: float) -> tuple[int | None, list[int]]:
        """An answered stream to reuse, if a fresh one is kept, and the stale ones to finish."""
        oldest = now - self.limits.idle_stream_reuse_seconds
        stale: list[int] = []
        while self._idle:
            stream_id, idle_since = self._idle.pop()
            if idle_since >= oldest:
                self._busy += 1
                return stream_id, stale
            self._forget(stream_id)
            stale.append(stream_id)
        return None, stale

    def release_stream(self, stream_id: int, now: float) -> bool:
        """Our request on ``stream_id`` is over: True if kept for reuse, else finish it."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.state is not StreamState.IDLE:
            self.close_stream(stream_id, now)
            return False
        if len(self._idle) >= MAX_IDLE_STREAMS or stream.decoder.buffered_bytes:
            self.close_stream(stream_id, now)
            return False
        self._idle.append((stream_id, now))
        self._end_busy(now)
        return True

    def close_stream(self, stream_id: int, now: float) -> None:
        """The transport finished or reset ``stream_id``: forget it and what it held."""
        if stream_id in self._streams:
            self._forget(stream_id)
            self._end_busy(now)

    def state(self, stream_id: int) -> StreamState:
        """Where ``stream_id`` is (a forgotten stream is ``FAILED``)."""
        stream = self._streams.get(stream_id)
        return StreamState.FAILED if stream is None else stream.state

    def _add(self, side: Side) -> int:
        stream_id = self._next_id
        self._next_id += 1
        self._streams[stream_id] = RequestStream(
            stream_id, side, StreamState.IDLE, self._verifier, self._assembly_room
        )
        self._busy += 1
        return stream_id

    def _forget(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.forget()
        self._budget.release(stream_id)

    def _end_busy(self, now: float) -> None:
        self._busy -= 1
        self._last_busy = now

    # -- receiving --------------------------------------------------------------------------

    def receive(self, stream_id: int, data: bytes, now: float) -> list[Event]:
        """Bytes the peer sent on ``stream_id`` (``b""``: it ended the stream cleanly)."""
        if self._failed is not None:
            raise self._failed
        stream = self._streams.get(stream_id)
        if stream is None or stream.state in TERMINAL:
            return []
        try:
            events = stream.feed(data, now)
            self._budget.hold(stream_id, stream.decoder.buffered_bytes)
        except ProtocolError as exc:
            self._failed = exc
            raise
        except FiccError:  # past the budget: this stream is refused, and lets go of its bytes
            stream.state = StreamState.FAILED
            self._budget.release(stream_id)
            raise
        return events

    def receive_control(self, data: bytes, now: float) -> list[Event]:
        """Bytes of the control stream: heartbeats only, or an error saying why it ends."""
        if self._failed is not None:
            raise self._failed
        try:
            if not data:
                if self._control.buffered_bytes:
                    raise ProtocolError("the peer ended a stream in the middle of a frame")
                return [PeerClosed("the peer closed the session")]
            for payload in self._control.feed(data):
                message = decode_message_parts([memoryview(payload)])
                if isinstance(message, Heartbeat):
                    self._liveness.heard(now, message)
                elif isinstance(message, Error):
                    return [PeerClosed(f"the peer closed the session: {message.message}")]
                else:
                    raise ProtocolError("only heartbeats travel on the control stream")
        except ProtocolError as exc:
            self._failed = exc
            raise
        return []

    def read_size(self, stream_id: int) -> int:
        """How much to ask for in the next read: about a frame, at least what one still lacks."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return MIN_READ_BYTES
        return max(stream.read_bytes, stream.decoder.wanted_bytes)

    # -- deadlines --------------------------------------------------------------------------

    def read_deadline(self, stream_id: int) -> float | None:
        """When the peer must have sent more on ``stream_id``: a frame under way must complete,
        and a serving stream must carry its next request (``None``: no deadline now)."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return None
        return None if stream is None else stream.read_deadline(self.limits.read_deadline_seconds)

    def read_expired(self, stream_id: int) -> PeerUnreachable:
        """The error for a passed :meth:`read_deadline`; the stream is failed (reset it)."""
        limit = self.limits.read_deadline_seconds
        stream = self._streams.get(stream_id)
        if stream is not None:
            frame_late = stream.frame_is_late()
            stream.state = StreamState.FAILED
            self._budget.release(stream_id)
            if frame_late:
                return PeerUnreachable(
                    f"the peer began a frame and did not complete it within {limit:g} s",
                    details={"limit": "frame_read_seconds", "max": limit},
                )
        return PeerUnreachable(
            f"no request on the stream within {limit:g} s",
            details={"limit": "request_read_seconds", "max": limit},
        )

    def answer_flushed(self, stream_id: int, now: float) -> None:
        """Our answer's last byte left: the next request's deadline runs from ``now``."""
        stream = self._streams.get(stream_id)
        if stream is not None and stream.state is StreamState.IDLE:
            stream.waiting_since = now

    def heartbeat_due(self, now: float) -> bytes | None:
        """The heartbeat frame to write on the control stream now, if one is due."""
        beat = self._liveness.due(now)
        return None if beat is None else encode_frame(encode_message(beat))

    def check_alive(self, now: float) -> FiccError | None:
        """Why the session must close now: a silent peer, or an unpaired one left idle."""
        if self._liveness.is_dead(now):
            return PeerUnreachable("the peer stopped answering heartbeats")
        limit = self._idle_limit
        if limit is not None and self._busy == 0 and now - self._last_busy > limit:
            return PeerUnreachable("a session without a pairing stayed idle")
        return None

    def next_deadline(self) -> float:
        """The next instant :meth:`heartbeat_due` or :meth:`check_alive` may change."""
        deadline = self._liveness.next_deadline()
        if self._idle_limit is not None and self._busy == 0:
            deadline = min(deadline, self._last_busy + self._idle_limit)
        return deadline

    # -- sending ----------------------------------------------------------------------------

    def _move(self, stream_id: int, kind: str) -> RequestStream:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise LocalProtocolError(f"cannot send {kind} on stream {stream_id}: it is closed")
        stream.state = after_sending(stream.side, stream.state, kind)
        return stream

    def send_request(
        self,
        stream_id: int,
        operation: str,
        body: dict[str, Any],
        request_id: str | None,
        *,
        streaming: bool,
        max_answer_bytes: int | None = None,
    ) -> bytes:
        """Our signed request; a body too large for one frame follows as chunks and an end.

        ``max_answer_bytes``: the largest JSON answer it may have (the operation's bound); a
        larger one fails the stream before it is decoded. Before a pairing it is at most
        :data:`MAX_UNPAIRED_ANSWER_BYTES`; without it, the largest any grant allows.
        """
        stream = self._move(stream_id, "request_stream" if streaming else "request")
        ceiling = MAX_JSON_ANSWER_BYTES if self.paired else MAX_UNPAIRED_ANSWER_BYTES
        stream.max_answer_bytes = min(ceiling, max_answer_bytes or ceiling)
        request, following = self._signer.sign_fitting(operation, body, request_id)
        frames = encode_frame(encode_message(request))
        if following is None:
            return frames
        end = encode_frame(encode_message(End(len(following))))
        return frames + encode_chunk_frames(following) + end

    def send_cancel(self, stream_id: int) -> bytes:
        """Abandon our request in flight (then reset the stream)."""
        self._move(stream_id, "cancel")
        return encode_frame(encode_message(Cancel()))

    def send_answer(self, stream_id: int, result: dict[str, Any] | bytes) -> bytes:
        """A JSON answer (or its canonical JSON): one frame when it fits, else chunks and an
        end."""
        framed, chunked = encode_answer(result)
        self._move(stream_id, "end" if chunked else "response")
        return framed

    def send_chunk(self, stream_id: int, data: bytes) -> bytes:
        """A piece of a streamed answer."""
        stream = self._move(stream_id, "chunk")
        stream.total_bytes += len(data)
        return encode_chunk_frames(data)

    def send_end(self, stream_id: int) -> bytes:
        """The end of a streamed answer, with the total of its chunks."""
        stream = self._move(stream_id, "end")
        total, stream.total_bytes = stream.total_bytes, 0
        return encode_frame(encode_message(End(total)))

    def send_error(self, stream_id: int, error: FiccError | Error) -> bytes:
        """A refusal or failure ending the request on ``stream_id``."""
        stream = self._move(stream_id, "error")
        stream.total_bytes = 0
        frame = error if isinstance(error, Error) else Error.from_exception(error)
        return encode_frame(encode_message(frame))
