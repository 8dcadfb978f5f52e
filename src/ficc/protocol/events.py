"""What :class:`~ficc.protocol.connection.PeerConnection` tells its transport happened."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ficc.base.errors import TooLarge
from ficc.protocol.messages import Error, Request


@dataclass(frozen=True)
class RequestReceived:
    """A verified request (its body assembled) for the handler."""

    stream_id: int
    request: Request


@dataclass(frozen=True)
class LargeBodyReceived:
    """A verified request whose large body arrived whole: complete it off the event loop
    (:func:`ficc.protocol.answers.complete_request`), then handle it."""

    stream_id: int
    request: Request
    data: bytes


@dataclass(frozen=True)
class RequestRefused:
    """A request whose announced body was larger than the connection takes: answer it with
    ``error`` (its chunks were dropped as they came)."""

    stream_id: int
    request: Request
    error: TooLarge


@dataclass(frozen=True)
class RequestCancelled:
    """The requester abandoned the request in flight: stop its handler, reset the stream."""

    stream_id: int


@dataclass(frozen=True)
class StreamEnded:
    """The peer ended the stream: cleanly between requests (serving) or without an answer."""

    stream_id: int


@dataclass(frozen=True)
class AnswerReceived:
    """The JSON answer to our request (from one frame, or gathered from chunks)."""

    stream_id: int
    body: dict[str, Any]


@dataclass(frozen=True)
class LargeAnswerReceived:
    """The JSON answer to our request, gathered from chunks but large: parse it off the event
    loop (:func:`ficc.protocol.answers.parse_large_answer`)."""

    stream_id: int
    data: bytes


@dataclass(frozen=True)
class DataReceived:
    """A chunk of a streamed answer to our request."""

    stream_id: int
    data: bytes


@dataclass(frozen=True)
class AnswerEnded:
    """A streamed answer ended, its total checked."""

    stream_id: int


@dataclass(frozen=True)
class ErrorReceived:
    """The peer refused or failed our request."""

    stream_id: int
    error: Error


@dataclass(frozen=True)
class PeerClosed:
    """The peer ended the control stream: the session is over."""

    reason: str


Event = (
    RequestReceived
    | LargeBodyReceived
    | RequestRefused
    | RequestCancelled
    | StreamEnded
    | AnswerReceived
    | LargeAnswerReceived
    | DataReceived
    | AnswerEnded
    | ErrorReceived
    | PeerClosed
)
