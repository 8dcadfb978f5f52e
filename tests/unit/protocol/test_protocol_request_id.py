"""The optional request ID of a REQUEST: absent, the bytes are those of the golden vectors;
present, it is signed with the rest, and only a well-formed one is accepted."""

from __future__ import annotations

import json

import pytest
from tests.unit.protocol.protocol_support import (
    INITIATOR_KEY,
    initiator,
    responder,
    run_handshake,
    verify,
)

from ficc.base.errors import ProtocolError
from ficc.protocol.messages import Request, decode_message, encode_message, request_content
from ficc.protocol.requests import RequestSigner, RequestVerifier


def test_a_request_without_an_id_is_encoded_as_before() -> None:
    assert request_content("discover", {}) == b'{"body":{},"operation":"discover"}'
    assert request_content("discover", {}, None) == request_content("discover", {})


def test_a_request_id_travels_and_is_covered_by_the_signature() -> None:
    left, right = initiator(), responder()
    run_handshake(left, right)
    signed = RequestSigner(left.session, INITIATOR_KEY).sign("discover", {}, "req-1")
    received = decode_message(encode_message(signed))
    assert isinstance(received, Request)
    assert received.request_id == "req-1"
    RequestVerifier(right.session, verify).verify(received)

    other = RequestSigner(left.session, INITIATOR_KEY).sign("discover", {}, "req-2")
    changed = Request(other.seq, other.signature, "discover", {}, request_id="req-3")
    with pytest.raises(ProtocolError, match="does not verify"):
        RequestVerifier(right.session, verify).verify(changed)


@pytest.mark.parametrize("request_id", ["", "has space", "x" * 129, 7, None])
def test_a_malformed_request_id_is_a_protocol_error(request_id: object) -> None:
    content = (
        b'{"body":{},"operation":"discover","request_id":'
        + (b"null" if request_id is None else _json(request_id))
        + b"}"
    )
    payload = bytes([0x10]) + (1).to_bytes(8, "big") + bytes(64) + content
    with pytest.raises(ProtocolError):
        decode_message(payload)


def _json(value: object) -> bytes:
    return json.dumps(value).encode()
