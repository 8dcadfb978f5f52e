"""What :class:`~ficc.protocol.connection.PeerConnection` tells its transport happened."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ficc.protocol.messages import Error, Request


@dataclass(frozen=True)
class RequestReceived:
    """A verified request (its body assembled) for the handler."""

    stream_id: int
    request: Request


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
    | RequestCancelled
    | StreamEnded
    | AnswerReceived
    | DataReceived
    | AnswerEnded
    | ErrorReceived
    | PeerClosed
)
