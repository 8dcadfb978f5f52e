"""Chunk frames: a stream's bulk bytes framed and read with a single copy of them.

A chunk message is its tag then the raw bytes (:class:`~ficc.protocol.messages.Chunk`): a whole
chunk frame is built around the data in one buffer, data over one frame is cut into frames of
equal size, and a received chunk's bytes are copied once, straight out of the decoder's views.
"""

from __future__ import annotations

import struct
from typing import Final

from ficc.base.errors import ProtocolError
from ficc.protocol.frames import MAX_FRAME_BYTES, join_parts
from ficc.protocol.messages import Chunk, Message, Tag, decode_message

CHUNK_HEADER_BYTES: Final = 1
MAX_CHUNK_BYTES: Final = MAX_FRAME_BYTES - CHUNK_HEADER_BYTES
_CHUNK_FRAME_HEAD = struct.Struct(">IB")


def encode_chunk_frame(data: bytes | memoryview) -> bytes:
    """A whole chunk frame (length, tag, bytes) built with a single copy of ``data``."""
    if len(data) > MAX_CHUNK_BYTES:
        raise ProtocolError(f"a chunk carries at most {MAX_CHUNK_BYTES} bytes")
    return _CHUNK_FRAME_HEAD.pack(len(data) + CHUNK_HEADER_BYTES, Tag.CHUNK) + data


def encode_chunk_frames(data: bytes | memoryview) -> bytes:
    """``data`` as chunk frames in one buffer, built with a single copy of ``data``.

    Data over one frame is cut into pieces of equal size (give or take a byte), so no frame
    is tiny: 1 MiB becomes two frames of 512 KiB, not one of 1 MiB - 1 and one of 1 byte.
    """
    size = len(data)
    if size <= MAX_CHUNK_BYTES:
        return encode_chunk_frame(data)
    view = memoryview(data)
    count = -(-size // MAX_CHUNK_BYTES)
    pieces: list[bytes | memoryview] = []
    start = 0
    for index in range(count):
        end = size * (index + 1) // count
        pieces.append(_CHUNK_FRAME_HEAD.pack(end - start + CHUNK_HEADER_BYTES, Tag.CHUNK))
        pieces.append(view[start:end])
        start = end
    return b"".join(pieces)


def decode_message_parts(parts: list[memoryview]) -> Message:
    """:func:`decode_message` of a payload given as views (``FrameDecoder.feed_parts``).

    A chunk's bytes are copied once, straight out of the views; other messages are small.
    """
    if parts and parts[0][0] == Tag.CHUNK:
        first = parts[0][CHUNK_HEADER_BYTES:]
        if len(parts) == 1:
            return Chunk(data=bytes(first))
        return Chunk(data=b"".join([first, *parts[1:]]))
    return decode_message(join_parts(parts))
