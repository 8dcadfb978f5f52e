"""Request signatures: bound to the session, the direction and the sequence number."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.protocol.protocol_support import (
    INITIATOR_KEY,
    RESPONDER_KEY,
    initiator,
    responder,
    run_handshake,
    verify,
)

from ficc.base.canonical import canonical_json
from ficc.base.errors import ProtocolError
from ficc.protocol.frames import MAX_FRAME_BYTES
from ficc.protocol.handshake import Session
from ficc.protocol.messages import (
    MAX_FOLLOWING_BODY_BYTES,
    BodyFollows,
    Request,
    Tag,
    decode_message,
    encode_message,
)
from ficc.protocol.requests import ReplayWindow, RequestSigner, RequestVerifier


def sessions() -> tuple[Session, Session]:
    left, right = initiator(), responder()
    run_handshake(left, right)
    return left.session, right.session


def test_a_signed_request_is_accepted_by_the_other_side() -> None:
    mine, theirs = sessions()
    request = RequestSigner(mine, INITIATOR_KEY).sign("discover", {})
    assert request.seq == 1
    RequestVerifier(theirs, verify).verify(request)


def test_a_request_signature_is_stable_for_fixed_keys_and_nonces() -> None:
    mine, _ = sessions()
    request = RequestSigner(mine, INITIATOR_KEY).sign("discover", {"x": 1})
    again = RequestSigner(mine, INITIATOR_KEY).sign("discover", {"x": 1})
    assert request == again
    assert len(request.signature) == 64


def test_a_replayed_request_is_refused() -> None:
    mine, theirs = sessions()
    request = RequestSigner(mine, INITIATOR_KEY).sign("discover", {})
    verifier = RequestVerifier(theirs, verify)
    verifier.verify(request)
    with pytest.raises(ProtocolError, match="replay"):
        verifier.verify(request)


def test_an_out_of_order_sequence_number_on_one_stream_is_refused() -> None:
    mine, theirs = sessions()
    signer = RequestSigner(mine, INITIATOR_KEY)
    first, second = signer.sign("discover", {}), signer.sign("discover", {})
    verifier = RequestVerifier(theirs, verify)
    verifier.verify(second)
    with pytest.raises(ProtocolError, match="out of order"):
        verifier.verify(first, previous_on_stream=second.seq)


def test_requests_on_parallel_streams_may_arrive_in_any_order_once_each() -> None:
    mine, theirs = sessions()
    signer = RequestSigner(mine, INITIATOR_KEY)
    batch = [signer.sign("discover", {"n": n}) for n in range(5)]
    verifier = RequestVerifier(theirs, verify)
    for request in reversed(batch):
        verifier.verify(request)
    with pytest.raises(ProtocolError):
        verifier.verify(batch[2])


def test_a_sequence_number_far_below_the_highest_is_refused() -> None:
    mine, theirs = sessions()
    signer = RequestSigner(mine, INITIATOR_KEY)
    old = signer.sign("discover", {})
    verifier = RequestVerifier(theirs, verify, window=4)
    for _ in range(4):
        verifier.verify(signer.sign("discover", {}))
    with pytest.raises(ProtocolError, match="out of order"):
        verifier.verify(old)


def test_a_request_signed_for_another_session_is_refused() -> None:
    mine, _ = sessions()
    left = initiator(nonce=bytes([0x77] * 32))
    right = responder()
    run_handshake(left, right)
    request = RequestSigner(mine, INITIATOR_KEY).sign("discover", {})
    with pytest.raises(ProtocolError, match="signature does not verify"):
        RequestVerifier(right.session, verify).verify(request)


def test_a_request_reflected_back_to_its_sender_is_refused() -> None:
    mine, theirs = sessions()
    request = RequestSigner(theirs, RESPONDER_KEY).sign("discover", {})
    reflected_to_signer = RequestVerifier(theirs, verify)
    with pytest.raises(ProtocolError):
        reflected_to_signer.verify(request)
    RequestVerifier(mine, verify).verify(request)


def test_a_tampered_body_is_refused() -> None:
    mine, theirs = sessions()
    request = RequestSigner(mine, INITIATOR_KEY).sign("discover", {"a": 1})
    tampered = Request(request.seq, request.signature, request.operation, {"a": 2})
    with pytest.raises(ProtocolError):
        RequestVerifier(theirs, verify).verify(tampered)


def test_a_refused_request_does_not_use_up_its_sequence_number() -> None:
    mine, theirs = sessions()
    request = RequestSigner(mine, INITIATOR_KEY).sign("discover", {})
    verifier = RequestVerifier(theirs, verify)
    with pytest.raises(ProtocolError):
        verifier.verify(Request(request.seq, bytes(64), request.operation, request.body))
    verifier.verify(request)


def test_sequence_number_zero_is_refused() -> None:
    with pytest.raises(ProtocolError):
        ReplayWindow().check(0)


@given(st.lists(st.integers(1, 300), max_size=60))
def test_the_replay_window_accepts_each_number_at_most_once(numbers: list[int]) -> None:
    window = ReplayWindow(size=64)
    accepted: list[int] = []
    for seq in numbers:
        try:
            window.check(seq)
        except ProtocolError:
            assert seq in accepted or seq <= max(accepted) - 64
            continue
        window.record(seq)
        assert seq not in accepted
        accepted.append(seq)


def test_a_body_too_large_for_a_frame_is_announced_signed_and_sent_after() -> None:
    mine, theirs = sessions()
    signer = RequestSigner(mine, INITIATOR_KEY)
    small, nothing = signer.sign_fitting("inference.invoke", {"text": "a"})
    assert nothing is None
    assert small.following is None
    assert small.body == {"text": "a"}
    body = {"text": "b" * (2 << 20)}
    announced, following = signer.sign_fitting("inference.invoke", body)
    assert following == canonical_json(body)
    assert announced.body == {}
    assert announced.following == BodyFollows(len(following), hashlib.sha256(following).hexdigest())
    # It travels in one frame, decodes to the same announcement, and its signature holds.
    payload = encode_message(announced)
    assert len(payload) <= MAX_FRAME_BYTES
    decoded = decode_message(payload)
    assert decoded == announced
    verifier = RequestVerifier(theirs, verify)
    verifier.verify(small)
    verifier.verify(decoded)  # type: ignore[arg-type]


def test_an_announcement_with_another_size_or_digest_does_not_verify() -> None:
    mine, theirs = sessions()
    announced, following = RequestSigner(mine, INITIATOR_KEY).sign_fitting(
        "inference.invoke", {"text": "c" * (2 << 20)}
    )
    assert following is not None
    assert announced.following is not None
    forged = replace(
        announced,
        content=b"",
        following=BodyFollows(announced.following.size, "0" * 64),
    )
    with pytest.raises(ProtocolError):
        RequestVerifier(theirs, verify).verify(forged)


@pytest.mark.parametrize(
    "extra",
    [
        {"body_bytes": 10},
        {"body_sha256": "0" * 64},
        {"body_bytes": 0, "body_sha256": "0" * 64},
        {"body_bytes": MAX_FOLLOWING_BODY_BYTES + 1, "body_sha256": "0" * 64},
        {"body_bytes": True, "body_sha256": "0" * 64},
        {"body_bytes": 10, "body_sha256": "G" * 64},
    ],
)
def test_a_malformed_announcement_is_a_protocol_error(extra: dict[str, object]) -> None:
    content = canonical_json({"body": {}, "operation": "x", **extra})
    payload = bytes([Tag.REQUEST]) + bytes(8 + 64) + content
    with pytest.raises(ProtocolError):
        decode_message(payload)


def test_an_announced_body_comes_with_an_empty_inline_body() -> None:
    content = canonical_json(
        {"body": {"a": 1}, "body_bytes": 10, "body_sha256": "0" * 64, "operation": "x"}
    )
    with pytest.raises(ProtocolError):
        decode_message(bytes([Tag.REQUEST]) + bytes(8 + 64) + content)
