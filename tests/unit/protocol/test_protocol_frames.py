"""FrameDecoder: any split point, bounded buffering, terminal errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.errors import ProtocolError
from ficc.protocol.frames import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    announced_length,
    encode_frame,
    join_parts,
)


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_frames_split_at_any_points_decode_to_the_same_payloads(
    payloads: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    received: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        received += decoder.feed(stream[start:cut])
        start = cut
    assert received == payloads
    assert decoder.buffered_bytes == 0


@given(st.integers(MAX_FRAME_BYTES + 1, 2**32 - 1), st.binary(max_size=100))
def test_an_oversized_length_is_refused_before_any_payload_is_buffered(
    length: int, tail: bytes
) -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(length.to_bytes(4, "big") + tail)
    assert decoder.buffered_bytes == 0


def test_an_oversized_length_arriving_byte_by_byte_is_refused_at_its_fourth_byte() -> None:
    decoder = FrameDecoder()
    header = (MAX_FRAME_BYTES + 1).to_bytes(4, "big")
    for byte in header[:3]:
        assert decoder.feed(bytes([byte])) == []
    with pytest.raises(ProtocolError):
        decoder.feed(header[3:])
    assert decoder.buffered_bytes == 0


def test_a_decoder_that_failed_refuses_everything_after() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        decoder.feed(encode_frame(b"fine"))


def test_a_frame_of_exactly_the_limit_is_accepted() -> None:
    assert announced_length(MAX_FRAME_BYTES.to_bytes(4, "big")) == MAX_FRAME_BYTES
    assert FrameDecoder().feed(encode_frame(bytes(MAX_FRAME_BYTES))) == [bytes(MAX_FRAME_BYTES)]


def test_encoding_a_payload_over_the_limit_is_refused() -> None:
    with pytest.raises(ProtocolError):
        encode_frame(bytes(MAX_FRAME_BYTES + 1))


@given(st.lists(st.binary(max_size=40_000), max_size=6), st.data())
def test_payloads_handed_out_as_views_join_to_the_same_payloads(
    payloads: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    received: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        for parts in decoder.feed_parts(stream[start:cut]):
            assert all(len(part) for part in parts)
            received.append(join_parts(parts))
        start = cut
    assert received == payloads
    assert decoder.buffered_bytes == 0


def test_a_payload_trickled_in_tiny_pieces_is_held_in_few_views() -> None:
    payload = bytes(range(256)) * 1024
    stream = encode_frame(payload)
    decoder = FrameDecoder()
    completed: list[list[memoryview]] = []
    for start in range(0, len(stream), 7):
        completed += decoder.feed_parts(stream[start : start + 7])
    assert len(completed) == 1
    assert len(completed[0]) <= 2
    assert join_parts(completed[0]) == payload
