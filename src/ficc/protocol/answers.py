"""Bodies too large for one frame: a request's body that follows it, a JSON answer in chunks.

Both are canonical JSON sent as chunks and an end. A following request body is exactly the
size its signed request announced and matches the signed SHA-256; only a paired peer may send
one, and a connection gathers at most :data:`MAX_ASSEMBLED_BYTES` of them at once.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any, Final

from ficc.base.errors import ProtocolError
from ficc.base.units import MiB
from ficc.protocol.canonical import canonical_json, parse_json_object
from ficc.protocol.frames import MAX_FRAME_BYTES, encode_frame
from ficc.protocol.messages import (
    MAX_FOLLOWING_BODY_BYTES,
    Chunk,
    End,
    Request,
    Response,
    encode_chunk_frames,
    encode_message,
)

MAX_ASSEMBLED_BYTES: Final = 2 * MAX_FOLLOWING_BODY_BYTES
"""Request bodies gathered from chunks at once in one session: two of the largest."""
MAX_JSON_ANSWER_BYTES: Final = 256 * MiB + MiB
"""The largest JSON answer a requester gathers from chunks: a grant's largest
``response_bytes`` (``ficc.domain.grants.MAX_RESPONSE_BYTES``), and room for the envelope."""


def encode_answer(result: dict[str, Any]) -> tuple[bytes, bool]:
    """A JSON answer's frames, and whether they are chunks and an end (it did not fit one)."""
    content = canonical_json(result)
    if len(content) < MAX_FRAME_BYTES:
        return encode_frame(encode_message(Response(result))), False
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


class AssemblyRoom:
    """The following request bodies one connection is gathering, in bytes announced."""

    def __init__(self, *, paired: bool) -> None:
        self._paired = paired
        self.held_bytes = 0

    def begin(self, request: Request) -> BodyAssembly:
        """Make room for ``request``'s following body, or refuse it."""
        following = request.following
        assert following is not None
        if not self._paired:
            raise ProtocolError("a request body in chunks needs a paired session")
        if self.held_bytes + following.size > MAX_ASSEMBLED_BYTES:
            raise ProtocolError(
                f"request bodies of more than {MAX_ASSEMBLED_BYTES} bytes at once in a session"
            )
        self.held_bytes += following.size
        return BodyAssembly(self, request)


class BodyAssembly:
    """One request's following body, gathered chunk by chunk."""

    def __init__(self, room: AssemblyRoom, request: Request) -> None:
        assert request.following is not None
        self._room: AssemblyRoom | None = room
        self._request = request
        self._size = request.following.size
        self._sha256 = request.following.sha256
        self._parts: list[bytes] = []
        self._total = 0

    def add(self, message: Chunk | End) -> Request | None:
        """Take the next chunk (``None``), or the end: the request with its body."""
        try:
            if isinstance(message, Chunk):
                self._total += len(message.data)
                if self._total > self._size:
                    raise ProtocolError("the request's body is longer than it announced")
                self._parts.append(message.data)
                return None
            if message.total_bytes != self._total or self._total != self._size:
                raise ProtocolError("the request's body is not the size it announced")
            data = b"".join(self._parts)
            self._parts.clear()
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
