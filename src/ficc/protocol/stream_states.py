"""The states of one request stream, as a table: what may arrive, and what we may send, when.

Each request travels on a bi-stream of its own (an answered stream may carry the next one).
The serving side sees ``IDLE → REQUEST_RECEIVED → ANSWERING → IDLE``; the requesting side
``IDLE → AWAITING → … → IDLE``. A move the table does not list is refused: by the peer, a
:class:`~ficc.base.errors.ProtocolError` that ends the connection; by us, a
:class:`~ficc.base.errors.LocalProtocolError` (a bug, or a stream that already ended).
"""

from __future__ import annotations

import enum
from typing import Final

from ficc.base.errors import LocalProtocolError, ProtocolError


class Side(enum.Enum):
    """Which end of the request a stream is: we serve it, or we sent it."""

    SERVING = "serving"
    REQUESTING = "requesting"


class StreamState(enum.Enum):
    """Where one stream is in its request's life."""

    IDLE = "idle"
    """Serving: waiting for a request. Requesting: free to carry the next one."""
    RECEIVING_BODY = "receiving_body"
    """Serving: a request arrived whose body follows in chunks and an end."""
    REQUEST_RECEIVED = "request_received"
    """Serving: the request is with its handler; only a cancel (or the end) may arrive."""
    ANSWERING = "answering"
    """Serving: chunks of the answer are going out."""
    AWAITING = "awaiting"
    """Requesting a JSON answer: nothing has come back yet."""
    GATHERING = "gathering"
    """Requesting a JSON answer that comes as chunks: gathering them."""
    AWAITING_STREAM = "awaiting_stream"
    """Requesting a streamed answer: nothing has come back yet."""
    STREAMING = "streaming"
    """Requesting a streamed answer: chunks are arriving."""
    DONE = "done"
    """The peer ended the stream cleanly between requests."""
    CANCELLED = "cancelled"
    """The request in flight was abandoned (by the requester's cancel or end)."""
    FAILED = "failed"
    """The stream broke (a deadline, a budget, an end without an answer): only a reset follows."""


TERMINAL: Final = frozenset({StreamState.DONE, StreamState.CANCELLED, StreamState.FAILED})

# What arrives: the message kinds, plus "eof" for the peer's clean end of the stream and
# "request_with_body" for a request whose body follows it.
_S, _R = Side.SERVING, Side.REQUESTING
_ = StreamState
RECEIVED: Final[dict[tuple[Side, StreamState, str], StreamState]] = {
    (_S, _.IDLE, "request"): _.REQUEST_RECEIVED,
    (_S, _.IDLE, "request_with_body"): _.RECEIVING_BODY,
    (_S, _.IDLE, "cancel"): _.IDLE,  # a cancel that crossed its answer
    (_S, _.IDLE, "eof"): _.DONE,
    (_S, _.RECEIVING_BODY, "chunk"): _.RECEIVING_BODY,
    (_S, _.RECEIVING_BODY, "end"): _.REQUEST_RECEIVED,
    (_S, _.REQUEST_RECEIVED, "cancel"): _.CANCELLED,
    (_S, _.REQUEST_RECEIVED, "eof"): _.CANCELLED,
    (_S, _.ANSWERING, "cancel"): _.CANCELLED,
    (_S, _.ANSWERING, "eof"): _.CANCELLED,
    (_R, _.AWAITING, "response"): _.IDLE,
    (_R, _.AWAITING, "chunk"): _.GATHERING,
    (_R, _.AWAITING, "error"): _.IDLE,
    (_R, _.AWAITING, "eof"): _.FAILED,
    (_R, _.GATHERING, "chunk"): _.GATHERING,
    (_R, _.GATHERING, "end"): _.IDLE,
    (_R, _.GATHERING, "error"): _.IDLE,
    (_R, _.GATHERING, "eof"): _.FAILED,
    (_R, _.AWAITING_STREAM, "chunk"): _.STREAMING,
    (_R, _.AWAITING_STREAM, "end"): _.IDLE,
    (_R, _.AWAITING_STREAM, "error"): _.IDLE,
    (_R, _.AWAITING_STREAM, "eof"): _.FAILED,
    (_R, _.STREAMING, "chunk"): _.STREAMING,
    (_R, _.STREAMING, "end"): _.IDLE,
    (_R, _.STREAMING, "error"): _.IDLE,
    (_R, _.STREAMING, "eof"): _.FAILED,
}
"""Moves the peer may make."""

SENT: Final[dict[tuple[Side, StreamState, str], StreamState]] = {
    (_S, _.REQUEST_RECEIVED, "response"): _.IDLE,
    (_S, _.REQUEST_RECEIVED, "error"): _.IDLE,
    (_S, _.REQUEST_RECEIVED, "chunk"): _.ANSWERING,
    (_S, _.REQUEST_RECEIVED, "end"): _.IDLE,
    (_S, _.ANSWERING, "chunk"): _.ANSWERING,
    (_S, _.ANSWERING, "end"): _.IDLE,
    (_S, _.ANSWERING, "error"): _.IDLE,
    (_R, _.IDLE, "request"): _.AWAITING,
    (_R, _.IDLE, "request_stream"): _.AWAITING_STREAM,
    (_R, _.AWAITING, "cancel"): _.CANCELLED,
    (_R, _.GATHERING, "cancel"): _.CANCELLED,
    (_R, _.AWAITING_STREAM, "cancel"): _.CANCELLED,
    (_R, _.STREAMING, "cancel"): _.CANCELLED,
}
"""Moves we may make."""

_REFUSALS: Final[dict[tuple[Side, StreamState], str]] = {
    (_S, _.IDLE): "expected a request, got {kind}",
    (_S, _.RECEIVING_BODY): "only chunks and an end may follow a request's body, got {kind}",
    (_S, _.REQUEST_RECEIVED): "only a cancel may follow a request in flight, got {kind}",
    (_S, _.ANSWERING): "only a cancel may follow a request in flight, got {kind}",
}


def after_receiving(side: Side, state: StreamState, kind: str) -> StreamState:
    """The state once ``kind`` arrived; a :class:`ProtocolError` if the peer may not send it."""
    following = RECEIVED.get((side, state, kind))
    if following is None:
        why = _REFUSALS.get((side, state), "unexpected {kind} in answer to a request")
        raise ProtocolError(why.format(kind=kind))
    return following


def after_sending(side: Side, state: StreamState, kind: str) -> StreamState:
    """The state once we sent ``kind``; :class:`LocalProtocolError` if we may not."""
    following = SENT.get((side, state, kind))
    if following is None:
        raise LocalProtocolError(f"cannot send {kind} on a {side.value} stream in {state.value}")
    return following


CANCELLED_CODE: Final = 1
PROTOCOL_ERROR_CODE: Final = 2
FAILED_CODE: Final = 3
GRANT_REVOKED_CODE: Final = 4
GRANT_EXPIRED_CODE: Final = 5
RESET_CODES: Final = {"grant_revoked": GRANT_REVOKED_CODE, "grant_expired": GRANT_EXPIRED_CODE}
"""Reset codes that name why the serving side ended a request (no frame could say it)."""


def reset_code(reason_code: str) -> int:
    """The reset code that tells the peer an error of code ``reason_code`` when no error frame
    can (a write cut off mid-frame, a requester that stopped reading)."""
    return RESET_CODES.get(reason_code, FAILED_CODE)
