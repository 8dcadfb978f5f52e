"""Bodies too large for one frame: a request's body that follows it, a JSON answer in chunks.

Both are canonical JSON sent as chunks and an end. A following request body is exactly the
size its signed request announced and matches the signed SHA-256; only a paired peer may send
one, and a connection gathers at most :data:`MAX_ASSEMBLED_BYTES` of them at once. One
announced larger than the connection's ``max_body_bytes`` (what the peer's grants allow) is
refused before any of it is kept: its chunks are counted and dropped, and the request is
answered ``too_large``. Bodies and answers over
:data:`~ficc.protocol.limits.OFF_LOOP_JSON_BYTES` are handed over as bytes, for the
transport to decode in a worker thread (:func:`complete_request`, :func:`parse_large_answer`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Final

from ficc.base.canonical import canonical_json
from ficc.base.errors import ProtocolError, TooLarge
from ficc.base.units import MiB
from ficc.protocol.canonical import parse_json_object
from ficc.protocol.chunk_frames import encode_chunk_frames
from ficc.protocol.frames import MAX_FRAME_BYTES, encode_frame
from ficc.protocol.limits import OFF_LOOP_JSON_BYTES
from ficc.protocol.messages import (
    MAX_FOLLOWING_BODY_BYTES,
    Chunk,
    End,
    Request,
    Tag,
    encode_message,
)

MAX_ASSEMBLED_BYTES: Final = 2 * MAX_FOLLOWING_BODY_BYTES
"""Request bodies gathered from chunks at once in one session: two of the largest."""
MAX_JSON_ANSWER_BYTES: Final = 256 * MiB + MiB
"""The largest JSON answer a requester gathers from chunks: a grant's largest
``response_bytes`` (``ficc.domain.grants.MAX_RESPONSE_BYTES``), and room for the envelope."""


def encode_answer(result: dict[str, Any] | bytes) -> tuple[bytes, bool]:
    """A JSON answer's frames, and whether they are chunks and an end (it did not fit one).

    ``result`` is the answer, or its canonical JSON already encoded (and measured) by the
    serving side: either way it is encoded once.
    """
    content = result if isinstance(result, bytes) else canonical_json(result)
    if len(content) < MAX_FRAME_BYTES:
        return encode_frame(bytes([Tag.RESPONSE]) + content), False
    end = encode_frame(encode_message(End(len(content))))
    return encode_chunk_frames(content) + end, True


def gather_answer(parts: list[bytes], total_bytes: int, data: bytes) -> None:
    """Keep one chunk of a JSON answer, refusing one larger than any grant allows."""
    if total_bytes > MAX_JSON_ANSWER_BYTES:
        raise ProtocolError(
            f"a JSON answer of more than {MAX_JSON_ANSWER_BYTES} bytes was streamed"
        )
    parts.append(data)


def parse_answer(parts: list[bytes]) -> dict[str, Any]:
    """A gathered JSON answer, parsed as strictly as a ``RESPONSE``."""
    return parse_json_object(b"".join(parts), what="response")


def parse_large_answer(data: bytes) -> dict[str, Any]:
    """A gathered answer over :data:`OFF_LOOP_JSON_BYTES`, for a worker thread: parsed as
    strictly as a ``RESPONSE``, gradually (the event loop goes on meanwhile)."""
    return parse_json_object(data, what="response", gradual=True)


@dataclass(frozen=True)
class LargeBody:
    """A following body gathered whole but not yet checked or parsed (it is large)."""

    request: Request
    data: bytes


def complete_request(request: Request, data: bytes) -> Request:
    """``request`` with the body that followed it, for a worker thread: the signed SHA-256
    checked, the JSON parsed strictly and gradually. :class:`ProtocolError` is terminal."""
    assert request.following is not None
    if hashlib.sha256(data).hexdigest() != request.following.sha256:
        raise ProtocolError("the request's body does not match its signed SHA-256")
    body = parse_json_object(data, what="request body", gradual=True)
    return replace(request, body=body, following=None)


class AssemblyRoom:
    """The following request bodies one connection is gathering, in bytes announced.

    ``max_body_bytes``: the largest body this connection takes now (the transport sets it
    from the peer's grants before it hands over received bytes); a larger one is refused
    before any of it is kept.
    """

    def __init__(self, *, paired: bool, max_body_bytes: int = MAX_FOLLOWING_BODY_BYTES) -> None:
        self._paired = paired
        self.held_bytes = 0
        self.max_body_bytes = max_body_bytes

    def begin(self, request: Request) -> BodyAssembly:
        """Make room for ``request``'s following body, or refuse it."""
        following = request.following
        assert following is not None
        if not self._paired:
            raise ProtocolError("a request body in chunks needs a paired session")
        if following.size > self.max_body_bytes:
            refusal = TooLarge(
                f"the request body is {following.size} bytes; this peer's grants take at most "
                f"{self.max_body_bytes}",
                details={"limit": "request_bytes", "allowed": self.max_body_bytes},
            )
            return BodyAssembly(None, request, refusal)
        if self.held_bytes + following.size > MAX_ASSEMBLED_BYTES:
            raise ProtocolError(
                f"request bodies of more than {MAX_ASSEMBLED_BYTES} bytes at once in a session"
            )
        self.held_bytes += following.size
        return BodyAssembly(self, request)


class BodyAssembly:
    """One request's following body, gathered chunk by chunk (or, when ``refusal`` is set,
    counted and dropped: the request is then answered with the refusal)."""

    def __init__(
        self, room: AssemblyRoom | None, request: Request, refusal: TooLarge | None = None
    ) -> None:
        assert request.following is not None
        self._room: AssemblyRoom | None = room
        self._refusal = refusal
        self._request = request
        self._size = request.following.size
        self._sha256 = request.following.sha256
        self._parts: list[bytes] = []
        self._total = 0

    @property
    def request(self) -> Request:
        """The request whose body this is (its body not yet set)."""
        return self._request

    def add(self, message: Chunk | End) -> Request | LargeBody | TooLarge | None:
        """Take the next chunk (``None``), or the end: the request with its body, the large
        body still to complete (:func:`complete_request`), or the refusal to answer with."""
        try:
            if isinstance(message, Chunk):
                self._total += len(message.data)
                if self._total > self._size:
                    raise ProtocolError("the request's body is longer than it announced")
                if self._refusal is None:
                    self._parts.append(message.data)
                return None
            if message.total_bytes != self._total or self._total != self._size:
                raise ProtocolError("the request's body is not the size it announced")
            if self._refusal is not None:
                return self._refusal
            data = b"".join(self._parts)
            self._parts.clear()
            if len(data) > OFF_LOOP_JSON_BYTES:
                return LargeBody(self._request, data)  # the room is held until it is done
            if hashlib.sha256(data).hexdigest() != self._sha256:
                raise ProtocolError("the request's body does not match its signed SHA-256")
            body = parse_json_object(data, what="request body")
            self.abandon()
            return replace(self._request, body=body, following=None)
        except ProtocolError:
            self.abandon()
            raise

    def abandon(self) -> None:
        """Give the room back (the body is complete, or its stream ended)."""
        if self._room is not None:
            self._room.held_bytes -= self._size
            self._room = None
            self._parts.clear()
