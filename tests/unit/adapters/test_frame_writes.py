"""A frame goes to iroh in one write: each write call costs a round of the event loop and of
iroh's runtime, and a 512 KiB chunk cut into 256 KiB pieces (its last few bytes alone) held
a bulk stream to 0.69x raw iroh."""

from __future__ import annotations

from typing import Any

from ficc.adapters.hypernet.streams import FrameStream
from ficc.protocol.chunk_frames import MAX_CHUNK_BYTES, encode_chunk_frames
from ficc.protocol.frames import MAX_FRAME_BYTES


class _Send:
    def __init__(self) -> None:
        self.writes: list[int] = []
        self.data = bytearray()

    async def write_all(self, piece: bytes) -> None:
        self.writes.append(len(piece))
        self.data += piece


class _Stream:
    """What FrameStream asks of an iroh bi-stream to write."""

    def __init__(self) -> None:
        self.sending = _Send()

    def send(self) -> _Send:
        return self.sending

    def recv(self) -> object:
        return object()


def _stream() -> tuple[FrameStream, _Send]:
    raw = _Stream()
    stream: Any = raw
    return FrameStream(stream), raw.sending


async def test_a_half_mebibyte_chunk_and_a_largest_frame_are_each_one_write() -> None:
    stream, sent = _stream()
    half = encode_chunk_frames(bytes(512 * 1024))
    largest = encode_chunk_frames(bytes(MAX_CHUNK_BYTES))
    assert len(largest) > MAX_FRAME_BYTES
    await stream.write(half)
    await stream.write(largest)
    assert sent.writes == [len(half), len(largest)]
    assert bytes(sent.data) == half + largest
    assert not stream.torn


async def test_frames_written_together_go_in_pieces_of_at_most_a_frame() -> None:
    stream, sent = _stream()
    frames = encode_chunk_frames(bytes(MAX_CHUNK_BYTES)) * 3
    await stream.write(frames)
    assert len(sent.writes) == 3
    assert bytes(sent.data) == frames
