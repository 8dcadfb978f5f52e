"""Golden vectors and properties of the message encoding."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ficc.base.canonical import canonical_json
from ficc.base.errors import ProtocolError
from ficc.protocol.canonical import parse_canonical_json
from ficc.protocol.chunk_frames import (
    MAX_CHUNK_BYTES,
    decode_message_parts,
    encode_chunk_frame,
    encode_chunk_frames,
)
from ficc.protocol.frames import FrameDecoder, encode_frame
from ficc.protocol.messages import (
    Cancel,
    Challenge,
    Chunk,
    End,
    Error,
    Heartbeat,
    Hello,
    Message,
    Proof,
    Request,
    Response,
    decode_message,
    encode_message,
)

GOLDEN: dict[str, tuple[Message, str]] = {
    "hello": (
        Hello(bytes([0xA1] * 32), (1,)),
        "017b2268797065726e65745f6964223a22" + "6131" * 32 + "222c2276657273696f6e73223a5b315d7d",
    ),
    "hello offering two versions": (
        Hello(bytes([0xA1] * 32), (1, 2)),
        "017b2268797065726e65745f6964223a22"
        + "6131" * 32
        + "222c2276657273696f6e73223a5b312c325d7d",
    ),
    "challenge": (
        Challenge(bytes(range(32))),
        "02000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    ),
    "proof": (
        Proof(7, bytes([0x33] * 32), bytes([0x44] * 64)),
        "03" + "0000000000000007" + "33" * 32 + "44" * 64,
    ),
    "request with an empty body": (
        Request(5, bytes([0x55] * 64), "discover", {}),
        "10"
        + "0000000000000005"
        + "55" * 64
        + "7b22626f6479223a7b7d2c226f7065726174696f6e223a22646973636f766572227d",
    ),
    "request with a body": (
        Request(
            2**40,
            bytes([0x66] * 64),
            "inference.get",
            {"service": "svc_x", "n": [1, 2.5, None, True]},
        ),
        "10"
        + "0000010000000000"
        + "66" * 64
        + "7b22626f6479223a7b226e223a5b312c322e352c6e756c6c2c747275655d2c2273657276696365223a"
        "227376635f78227d2c226f7065726174696f6e223a22696e666572656e63652e676574227d",
    ),
    "response": (
        Response({"result": "ok", "é": 1}),
        "117b22726573756c74223a226f6b222c22c3a9223a317d",
    ),
    "error": (
        Error("grant_revoked", "the grant was revoked", {"grant": "grt_x"}),
        "127b22636f6465223a226772616e745f7265766f6b6564222c2264657461696c73223a7b226772616e74"
        "223a226772745f78227d2c226d657373616765223a22746865206772616e7420776173207265766f6b6564227d",
    ),
    "chunk": (Chunk(b"\x00\x01\xff raw"), "130001ff20726177"),
    "empty chunk": (Chunk(b""), "13"),
    "end": (End(1234567890), "1400000000499602d2"),
    "cancel": (Cancel(), "15"),
    "heartbeat": (Heartbeat(3), "200000000000000003"),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_every_message_encodes_to_its_golden_vector(name: str) -> None:
    message, expected = GOLDEN[name]
    assert encode_message(message).hex() == expected


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_every_golden_vector_decodes_to_its_message(name: str) -> None:
    message, payload = GOLDEN[name]
    assert decode_message(bytes.fromhex(payload)) == message


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
versions = st.lists(st.integers(1, 65535), min_size=1, max_size=16).map(tuple)
u64 = st.integers(min_value=0, max_value=2**64 - 1)


def fixed(size: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=size, max_size=size)


messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        Hello, fixed(32), st.lists(st.integers(1, 65535), min_size=1, max_size=16).map(tuple)
    ),
    st.builds(Challenge, fixed(32)),
    st.builds(Proof, u64, fixed(32), fixed(64)),
    st.builds(Request, u64, fixed(64), st.text(min_size=1, max_size=30), json_objects),
    st.builds(Response, json_objects),
    st.builds(
        Error, st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True), st.text(), json_objects
    ),
    st.builds(Chunk, st.binary(max_size=2000)),
    st.builds(End, u64),
    st.just(Cancel()),
    st.builds(Heartbeat, u64),
)


@given(messages)
def test_every_message_survives_a_round_trip(message: Message) -> None:
    assert decode_message(encode_message(message)) == message


@given(st.binary(max_size=300))
def test_random_bytes_decode_to_a_message_or_a_protocol_error_only(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_message(data)


@given(st.sampled_from([0x01, 0x10, 0x11, 0x12]), st.binary(max_size=200))
def test_random_bytes_after_a_json_tag_give_only_protocol_errors(tag: int, data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_message(bytes([tag]) + data)


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x7f",
        b"\x02" + bytes(31),
        b"\x03" + bytes(10),
        b"\x14" + bytes(9),
        b"\x15\x00",
        b"\x11" + b'{"a": 1}',
        b"\x11" + b'{"a":1,"a":2}',
        b"\x11" + b'{"a":NaN}',
        b"\x11" + b"[1]",
        b"\x11" + b'{"a":"\xff"}',
        b"\x11" + b"[" * 5000 + b"]" * 5000,
        b"\x11" + b'{"a":' + b"9" * 5000 + b"}",
        b"\x12" + b'{"code":"Bad Code","details":{},"message":"x"}',
        b"\x10" + bytes(20),
        b"\x10" + bytes(72) + b'{"body":[],"operation":"x"}',
        b"\x10" + bytes(72) + b'{"body":{},"operation":""}',
        b"\x01" + b'{"hypernet_id":"ab","versions":[1]}',
        b"\x01" + b'{"hypernet_id":"' + b"a" * 64 + b'","versions":[]}',
        b"\x01" + b'{"hypernet_id":"' + b"a" * 64 + b'","versions":[true]}',
    ],
)
def test_a_malformed_payload_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_message(payload)


@given(st.binary(max_size=5000))
def test_a_chunk_frame_is_built_in_one_piece_with_the_generic_encoding(data: bytes) -> None:
    assert encode_chunk_frame(data) == encode_frame(encode_message(Chunk(data)))


def test_a_chunk_larger_than_a_frame_is_refused() -> None:
    with pytest.raises(ProtocolError):
        encode_chunk_frame(bytes(MAX_CHUNK_BYTES + 1))


def test_an_error_whose_details_json_cannot_carry_is_sent_without_details() -> None:
    error = Error.from_exception(ProtocolError("broken", details={"x": object()}))
    assert error == Error("protocol_error", "broken", {})


@given(messages, st.integers(1, 64))
def test_a_message_decoded_from_views_equals_the_message_decoded_whole(
    message: Message, step: int
) -> None:
    frame = encode_frame(encode_message(message))
    decoder = FrameDecoder()
    payloads = [
        parts
        for start in range(0, len(frame), step)
        for parts in decoder.feed_parts(frame[start : start + step])
    ]
    assert len(payloads) == 1
    assert decode_message_parts(payloads[0]) == decode_message(encode_message(message))


def test_a_decoded_request_carries_its_content_and_encodes_back_to_the_same_bytes() -> None:
    request = Request(7, bytes(64), "models.range", {"offset": 0, "é": [1, 2]})
    payload = encode_message(request)
    decoded = decode_message(payload)
    assert isinstance(decoded, Request)
    assert decoded.content == canonical_json({"body": request.body, "operation": request.operation})
    assert encode_message(decoded) == payload


@pytest.mark.parametrize(
    "size", [0, 1, MAX_CHUNK_BYTES, MAX_CHUNK_BYTES + 1, 3 * MAX_CHUNK_BYTES + 7]
)
def test_chunk_frames_carry_the_data_in_frames_of_nearly_equal_size(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    decoder = FrameDecoder()
    chunks = [decode_message(payload) for payload in decoder.feed(encode_chunk_frames(data))]
    assert all(isinstance(chunk, Chunk) for chunk in chunks)
    pieces = [chunk.data for chunk in chunks if isinstance(chunk, Chunk)]
    assert b"".join(pieces) == data
    assert max(len(p) for p in pieces) - min(len(p) for p in pieces) <= 1


@given(st.binary(max_size=200))
def test_the_fast_canonical_parse_accepts_exactly_what_the_strict_one_does(data: bytes) -> None:
    try:
        value = parse_canonical_json(data, what="x")
    except ProtocolError:
        return
    assert canonical_json(value) == data


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b'{"a":1,"a":1}', "duplicate JSON key"),
        (b'{"a":NaN}', "JSON constant NaN"),
        (b'{"a": 1}', "not canonical"),
    ],
)
def test_a_refused_json_says_why(text: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        parse_canonical_json(text, what="x")
