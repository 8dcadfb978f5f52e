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


class FrameDecoder:
    """Turns a byte stream, split anywhere, into frame payloads.

    After a :class:`ProtocolError` the decoder is closed: every later ``feed`` raises again.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._expected: int | None = None
        self._failed: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held while waiting for the rest of a frame (never more than one frame)."""
        return len(self._buffer)

    @property
    def wanted_bytes(self) -> int:
        """Bytes still missing from the frame in progress (its header, or its payload)."""
        if self._expected is None:
            return LENGTH_BYTES - len(self._buffer)
        return self._expected - len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every payload they complete, in order."""
        if self._failed is not None:
            raise self._failed
        payloads: list[bytes] = []
        view = memoryview(data)
        while view:
            if self._expected is None:
                need = LENGTH_BYTES - len(self._buffer)
                self._buffer += view[:need]
                view = view[need:]
                if len(self._buffer) < LENGTH_BYTES:
                    break
                try:
                    self._expected = announced_length(bytes(self._buffer))
                except ProtocolError as exc:
                    self._failed = exc
                    self._buffer.clear()
                    raise
                self._buffer.clear()
            need = self._expected - len(self._buffer)
            self._buffer += view[:need]
            view = view[need:]
            if len(self._buffer) == self._expected:
                payloads.append(bytes(self._buffer))
                self._buffer.clear()
                self._expected = None
        return payloads
