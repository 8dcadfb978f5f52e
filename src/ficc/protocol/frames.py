"""Length-prefixed frames: a 4-byte big-endian length, then that many payload bytes.

A frame's payload is at most :data:`MAX_FRAME_BYTES`. A larger announced length is refused
from the 4 length bytes alone, before any payload is buffered, and the refusal is terminal.
"""

from __future__ import annotations

from typing import Final

from ficc.base.errors import ProtocolError
from ficc.base.units import MiB

MAX_FRAME_BYTES: Final = 1 * MiB
LENGTH_BYTES: Final = 4
_VIEW_BYTES: Final = 16 * 1024
"""Smaller pieces of a payload are copied together rather than kept as views, so a peer that
trickles a frame in tiny reads cannot make the decoder hold many views of it."""


def encode_frame(payload: bytes) -> bytes:
    """Header and payload as one buffer, so a transport writes a frame in one call."""
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError(
            f"frame payload of {len(payload)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
        )
    return len(payload).to_bytes(LENGTH_BYTES, "big") + payload


def announced_length(header: bytes) -> int:
    """The payload length a 4-byte header announces, refused if over the limit."""
    if len(header) != LENGTH_BYTES:
        raise ProtocolError("a frame header is exactly 4 bytes")
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(
            f"announced frame length {length} exceeds the {MAX_FRAME_BYTES}-byte limit"
        )
    return length


def join_parts(parts: list[memoryview]) -> bytes:
    """The bytes of a payload :meth:`FrameDecoder.feed_parts` handed out as views."""
    if not parts:
        return b""
    return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)


class FrameDecoder:
    """Turns a byte stream, split anywhere, into frame payloads.

    A payload is kept as views of the received buffers until it is complete, so its bytes are
    copied at most once (:meth:`feed_parts` hands out the views themselves).
    After a :class:`ProtocolError` the decoder is closed: every later ``feed`` raises again.
    """

    def __init__(self) -> None:
        self._header = bytearray()
        self._parts: list[memoryview] = []
        self._small = bytearray()
        self._have = 0
        self._expected: int | None = None
        self._failed: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held while waiting for the rest of a frame (never more than one frame)."""
        return len(self._header) + self._have

    @property
    def wanted_bytes(self) -> int:
        """Bytes still missing from the frame in progress (its header, or its payload)."""
        if self._expected is None:
            return LENGTH_BYTES - len(self._header)
        return self._expected - self._have

    def unconsumed(self) -> bytes:
        """The bytes fed but not yet handed out as a payload, as they arrived (so another
        decoder can go on where this one stopped)."""
        if self._expected is None:
            return bytes(self._header)
        header = self._expected.to_bytes(LENGTH_BYTES, "big")
        return header + b"".join(self._parts) + bytes(self._small)

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every payload they complete, in order."""
        return [join_parts(parts) for parts in self.feed_parts(data)]

    def feed_parts(self, data: bytes) -> list[list[memoryview]]:
        """Like :meth:`feed`, but each payload as the views of the input it spans.

        The views are never empty (an empty payload is an empty list); they view immutable
        bytes only (other buffers are copied first), which they keep alive.
        """
        if self._failed is not None:
            raise self._failed
        payloads: list[list[memoryview]] = []
        view = memoryview(data if type(data) is bytes else bytes(data))
        while view:
            if self._expected is None:
                need = LENGTH_BYTES - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < LENGTH_BYTES:
                    break
                try:
                    self._expected = announced_length(bytes(self._header))
                except ProtocolError as exc:
                    self._failed = exc
                    self._header.clear()
                    raise
                self._header.clear()
            need = self._expected - self._have
            if need:
                piece = view[:need]
                view = view[need:]
                self._have += len(piece)
                if len(piece) < _VIEW_BYTES:
                    self._small += piece
                else:
                    self._flush_small()
                    self._parts.append(piece)
            if self._have == self._expected:
                self._flush_small()
                payloads.append(self._parts)
                self._parts = []
                self._have = 0
                self._expected = None
        return payloads

    def _flush_small(self) -> None:
        if self._small:
            self._parts.append(memoryview(bytes(self._small)))
            self._small.clear()
