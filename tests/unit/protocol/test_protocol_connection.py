"""The sans-IO connection: stream states, signatures, caps and deadlines, with ``now`` given.

Two connections of one real handshake are wired back to back: what one's ``send_*`` returns is
fed to the other's ``receive``, split anywhere. The state machine drives requests, answers,
cancels and reuse in any order and checks both ends agree after every step.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from tests.unit.protocol.protocol_support import (
    INITIATOR_KEY,
    RESPONDER_KEY,
    initiator,
    responder,
    run_handshake,
    verify,
)

from ficc.base.errors import LimitExceeded, LocalProtocolError, PeerUnreachable, ProtocolError
from ficc.base.units import KiB, MiB
from ficc.domain.grants import MAX_RESPONSE_BYTES
from ficc.protocol.answers import MAX_JSON_ANSWER_BYTES, complete_request, parse_large_answer
from ficc.protocol.chunk_frames import MAX_CHUNK_BYTES
from ficc.protocol.connection import PeerConnection
from ficc.protocol.events import (
    AnswerEnded,
    AnswerReceived,
    DataReceived,
    ErrorReceived,
    Event,
    LargeAnswerReceived,
    LargeBodyReceived,
    PeerClosed,
    RequestCancelled,
    RequestReceived,
    RequestRefused,
    StreamEnded,
)
from ficc.protocol.frames import LENGTH_BYTES, MAX_FRAME_BYTES, FrameDecoder, encode_frame
from ficc.protocol.handshake import KnownPeer
from ficc.protocol.limits import (
    FRAME_OVERHEAD,
    MAX_PEER_STREAMS,
    MAX_UNPAIRED_ANSWER_BYTES,
    MAX_UNPAIRED_STREAMS,
    MIN_READ_BYTES,
    OFF_LOOP_JSON_BYTES,
    READ_DEADLINE_SECONDS,
    STREAM_CREDIT_MARGIN,
)
from ficc.protocol.liveness import PEER_SILENCE_LIMIT_SECONDS
from ficc.protocol.messages import (
    Cancel,
    Chunk,
    Error,
    Heartbeat,
    Request,
    Response,
    encode_message,
)
from ficc.protocol.stream_states import (
    GRANT_EXPIRED_CODE,
    GRANT_REVOKED_CODE,
    StreamState,
    reset_code,
)

START = 1000.0
ASKED_STATES = (
    StreamState.AWAITING,
    StreamState.GATHERING,
    StreamState.AWAITING_STREAM,
    StreamState.STREAMING,
)
"""Where a requester's stream stands while its answer may still come."""


def connected(*, paired: bool = True) -> tuple[PeerConnection, PeerConnection]:
    """A requester (the initiator) and a server (the responder) of one session."""
    known_by_initiator = KnownPeer(RESPONDER_KEY.public_key, 1) if paired else None
    known_by_responder = KnownPeer(INITIATOR_KEY.public_key, 1) if paired else None
    left, right = initiator(known_by_initiator), responder(known_by_responder)
    run_handshake(left, right)
    requester = PeerConnection(left.session, INITIATOR_KEY, verify, START)
    server = PeerConnection(right.session, RESPONDER_KEY, verify, START)
    return requester, server


def feed(
    conn: PeerConnection, stream_id: int, data: bytes, cuts: list[int], now: float
) -> list[Event]:
    """``data`` received in pieces cut at ``cuts``; every event the pieces complete."""
    events: list[Event] = []
    start = 0
    for cut in [*sorted({c for c in cuts if 0 < c < len(data)}), len(data)]:
        events.extend(conn.receive(stream_id, data[start:cut], now))
        start = cut
    return events


def one_request(
    requester: PeerConnection, server: PeerConnection, body: dict[str, Any], *, streaming: bool
) -> tuple[int, int, Request]:
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    frames = requester.send_request(asked, "discover", body, None, streaming=streaming)
    (event,) = server.receive(served, frames, START)
    assert isinstance(event, RequestReceived)
    return asked, served, event.request


def test_a_request_and_its_json_answer_cross_in_any_split() -> None:
    requester, server = connected()
    asked, served, request = one_request(requester, server, {"q": 1}, streaming=False)
    assert request.operation == "discover"
    assert request.body == {"q": 1}
    answer = server.send_answer(served, {"ok": True})
    assert feed(requester, asked, answer, [1, 3, 7], START) == [AnswerReceived(asked, {"ok": True})]
    assert requester.state(asked) is StreamState.IDLE
    assert server.state(served) is StreamState.IDLE


@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_a_streamed_answer_arrives_whole_however_it_is_split(cuts: list[int]) -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=True)
    sent = server.send_chunk(served, b"abc") + server.send_chunk(served, b"de" * 100)
    sent += server.send_end(served)
    events = feed(requester, asked, sent, cuts, START)
    data = b"".join(e.data for e in events if isinstance(e, DataReceived))
    assert data == b"abc" + b"de" * 100
    assert events[-1] == AnswerEnded(asked)


def test_an_end_that_miscounts_the_chunks_is_a_protocol_error_and_terminal() -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=True)
    server.send_chunk(served, b"abc")
    forged = encode_frame(encode_message(Chunk(b"abc"))) + server.send_end(served)[:-1] + b"\x04"
    with pytest.raises(ProtocolError, match="ended at 3 bytes"):
        requester.receive(asked, forged, START)
    with pytest.raises(ProtocolError):
        requester.receive(asked, b"", START)


def test_only_a_cancel_may_follow_a_request_in_flight() -> None:
    requester, server = connected()
    _asked, served, _ = one_request(requester, server, {}, streaming=False)
    second = requester.open_stream()
    again = requester.send_request(second, "discover", {}, None, streaming=False)
    with pytest.raises(ProtocolError, match="only a cancel may follow a request in flight"):
        server.receive(served, again, START)
    with pytest.raises(ProtocolError):  # the connection stays failed
        server.receive(server.accept_stream(START) or 0, b"", START)


def test_a_cancel_or_an_end_stops_the_request_in_flight_and_a_late_cancel_is_ignored() -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=False)
    assert server.receive(served, requester.send_cancel(asked), START) == [RequestCancelled(served)]
    asked, served, _ = one_request(requester, server, {}, streaming=False)
    assert server.receive(served, b"", START) == [RequestCancelled(served)]
    asked, served, _ = one_request(requester, server, {}, streaming=False)
    requester.receive(asked, server.send_answer(served, {}), START)
    assert server.receive(served, encode_frame(encode_message(Cancel())), START) == []
    assert server.receive(served, b"", START) == [StreamEnded(served)]


def test_a_request_replayed_on_its_stream_is_refused() -> None:
    requester, server = connected()
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    frames = requester.send_request(asked, "discover", {}, None, streaming=False)
    server.receive(served, frames, START)
    requester.receive(asked, server.send_answer(served, {}), START)
    with pytest.raises(ProtocolError, match="out of order on its stream"):
        server.receive(served, frames, START)


def test_a_frame_must_complete_within_the_read_deadline_from_its_first_byte() -> None:
    requester, server = connected()
    served = server.accept_stream(START)
    assert served is not None
    assert server.read_deadline(served) == START + READ_DEADLINE_SECONDS
    frames = requester.send_request(requester.open_stream(), "discover", {}, None, streaming=False)
    server.receive(served, frames[:5], START + 4)
    assert server.read_deadline(served) == START + READ_DEADLINE_SECONDS
    error = server.read_expired(served)
    assert error.details == {"limit": "request_read_seconds", "max": READ_DEADLINE_SECONDS}
    assert server.state(served) is StreamState.FAILED


def test_a_read_asks_for_about_one_frame_and_never_more_than_the_largest() -> None:
    """iroh's read zero-fills a buffer of the whole ask, so asking for several frames at once
    costs more than the reads it saves (measured in docs/benchmarks.md, bulk section)."""
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=True)
    assert requester.read_size(asked) == MIN_READ_BYTES
    chunk_frame = server.send_chunk(served, bytes(512 * KiB))
    frame_bytes = len(chunk_frame) - LENGTH_BYTES
    requester.receive(asked, chunk_frame, START)
    assert requester.read_size(asked) == frame_bytes + FRAME_OVERHEAD  # the next one, whole
    largest = server.send_chunk(served, bytes(MAX_CHUNK_BYTES))
    requester.receive(asked, largest[: 100 * KiB], START)
    lacking = len(largest) - 100 * KiB
    assert requester.read_size(asked) == lacking  # the frame under way, all it lacks
    requester.receive(asked, largest[100 * KiB : -10], START)
    assert requester.read_size(asked) == frame_bytes + FRAME_OVERHEAD
    requester.receive(asked, largest[-10:], START)
    assert requester.read_size(asked) == MAX_FRAME_BYTES + FRAME_OVERHEAD


def test_the_next_request_deadline_runs_from_the_answer_and_not_while_answering() -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=True)
    assert server.read_deadline(served) is None
    requester.receive(asked, server.send_chunk(served, b"x"), START)
    assert server.read_deadline(served) is None
    requester.receive(asked, server.send_end(served), START)
    assert server.read_deadline(served) is None  # the end is not written yet
    server.answer_flushed(served, START + 50)
    assert server.read_deadline(served) == START + 50 + READ_DEADLINE_SECONDS


def test_an_unpaired_peer_holds_few_streams_and_few_unfinished_bytes() -> None:
    _, server = connected(paired=False)
    streams = [server.accept_stream(START) for _ in range(MAX_UNPAIRED_STREAMS)]
    assert None not in streams
    assert server.accept_stream(START) is None
    # Frames of the largest size, all but their last byte: two fit the budget, no more.
    almost = MAX_FRAME_BYTES.to_bytes(4, "big") + b"\x05" * (MAX_FRAME_BYTES - 1)
    server.receive(streams[0] or 0, almost, START)
    server.receive(streams[2] or 0, almost, START)
    with pytest.raises(LimitExceeded) as refused:
        server.receive(streams[1] or 0, almost[:7], START)
    assert refused.value.details["limit"] == "buffered_bytes"
    assert server.state(streams[1] or 0) is StreamState.FAILED
    assert server._budget.held_bytes == 2 * (MAX_FRAME_BYTES - 1)  # the refused one let go
    server.close_stream(streams[0] or 0, START)
    server.close_stream(streams[1] or 0, START)
    assert server._budget.held_bytes == MAX_FRAME_BYTES - 1
    assert server.accept_stream(START) is not None


def test_the_stream_credit_holds_the_cap_and_the_peers_control_stream_with_room_to_reset() -> None:
    """128 request streams fit beside the control stream the initiator opened; the margin
    past them is what a peer past the cap sees reset with code 1 instead of waiting."""
    requester, server = connected()
    assert server.stream_credit == MAX_PEER_STREAMS + 1 + STREAM_CREDIT_MARGIN
    assert requester.stream_credit == MAX_PEER_STREAMS + STREAM_CREDIT_MARGIN
    streams = [server.accept_stream(START) for _ in range(MAX_PEER_STREAMS)]
    assert None not in streams
    assert server.accept_stream(START) is None


def test_an_unpaired_peer_may_not_send_a_body_in_chunks() -> None:
    requester, server = connected(paired=False)
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    big = {"blob": "x" * (MiB + 10)}
    with pytest.raises(ProtocolError, match="needs a paired session"):
        server.receive(
            served, requester.send_request(asked, "x", big, None, streaming=False), START
        )


def test_a_json_answer_too_large_for_a_frame_is_gathered_from_chunks() -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=False)
    large = {"text": "y" * (MiB + 10)}
    events = requester.receive(asked, server.send_answer(served, large), START)
    assert events == [AnswerReceived(asked, large)]
    assert requester.state(asked) is StreamState.IDLE


def test_a_paired_peer_sends_a_large_body_after_its_request() -> None:
    requester, server = connected()
    big = {"blob": "x" * (MiB + 10)}
    _, _, request = one_request(requester, server, big, streaming=False)
    assert request.body == big
    assert request.following is None


def test_a_body_announced_over_the_bound_is_answered_too_large_and_never_kept() -> None:
    """G7: the bound (what the peer's grants allow) is checked at the signed announcement,
    before any chunk is kept; the chunks are counted and dropped, the request answered
    too_large, and the stream serves the next request."""
    requester, server = connected()
    server.max_body_bytes = 600 * KiB
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    big = {"blob": "x" * (3 * MiB)}
    frames = requester.send_request(asked, "discover", big, None, streaming=False)
    head, rest = frames[:200], frames[200:]
    assert server.receive(served, head, START) == []
    assert server._assembly_room.held_bytes == 0
    (event,) = feed(server, served, rest, [MiB, 2 * MiB], START)
    assert isinstance(event, RequestRefused)
    assert event.error.details == {"limit": "request_bytes", "allowed": 600 * KiB}
    assert server._streams[served].body is None
    (answer,) = requester.receive(asked, server.send_error(served, event.error), START)
    assert isinstance(answer, ErrorReceived)
    assert answer.error.code == "too_large"
    assert server.state(served) is StreamState.IDLE
    assert requester.state(asked) is StreamState.IDLE


def test_a_large_body_within_the_bound_is_handed_over_to_complete_off_the_loop() -> None:
    """A body over OFF_LOOP_JSON_BYTES comes as bytes, completed (hash, strict parse) by a
    function the transport runs in a worker thread; its room stays held meanwhile."""
    requester, server = connected()
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    big = {"blob": "x" * (OFF_LOOP_JSON_BYTES + 10)}
    frames = requester.send_request(asked, "discover", big, None, streaming=False)
    (event,) = server.receive(served, frames, START)
    assert isinstance(event, LargeBodyReceived)
    assert server._assembly_room.held_bytes == len(event.data)
    assert complete_request(event.request, event.data).body == big
    with pytest.raises(ProtocolError, match="SHA-256"):
        complete_request(event.request, event.data[:-2] + b"}}")
    server.close_stream(served, START)
    assert server._assembly_room.held_bytes == 0


@pytest.mark.parametrize("size", [4 * KiB, MiB + 10], ids=["one frame", "in chunks"])
def test_an_answer_over_its_requests_bound_fails_the_stream_before_it_is_decoded(
    size: int,
) -> None:
    """G8: the requester names the most an answer may be; past it the stream fails (not
    the connection) before the JSON is decoded or gathered further."""
    requester, server = connected()
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    frames = requester.send_request(asked, "x", {}, None, streaming=False, max_answer_bytes=KiB)
    server.receive(served, frames, START)
    with pytest.raises(PeerUnreachable) as caught:
        requester.receive(asked, server.send_answer(served, {"t": "y" * size}), START)
    assert caught.value.details == {"limit": "answer_bytes", "allowed": KiB}
    assert requester.state(asked) is StreamState.FAILED
    assert requester.heartbeat_due(START + 1) is not None  # the connection goes on


def test_before_a_pairing_an_answer_is_at_most_64_kib_whatever_the_caller_asks() -> None:
    requester, server = connected(paired=False)
    asked = requester.open_stream()
    served = server.accept_stream(START)
    assert served is not None
    frames = requester.send_request(asked, "x", {}, None, streaming=False, max_answer_bytes=MiB)
    server.receive(served, frames, START)
    with pytest.raises(PeerUnreachable, match=f"passed {MAX_UNPAIRED_ANSWER_BYTES} bytes"):
        requester.receive(asked, server.send_answer(served, {"t": "y" * (2 * MiB)}), START)


def test_a_large_gathered_answer_is_handed_over_to_parse_off_the_loop() -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=False)
    large = {"text": "y" * (OFF_LOOP_JSON_BYTES + 10)}
    (event,) = requester.receive(asked, server.send_answer(served, large), START)
    assert isinstance(event, LargeAnswerReceived)
    assert parse_large_answer(event.data) == large


def test_heartbeats_keep_a_connection_alive_and_silence_ends_it() -> None:
    requester, server = connected()
    assert requester.heartbeat_due(START + 0.5) is None
    beat = requester.heartbeat_due(START + 1)
    assert beat is not None
    assert server.receive_control(beat, START + 1) == []
    assert server.check_alive(START + 1 + PEER_SILENCE_LIMIT_SECONDS - 0.1) is None
    dead = server.check_alive(START + 1 + PEER_SILENCE_LIMIT_SECONDS + 0.1)
    assert dead is not None
    assert "heartbeats" in dead.message
    assert server.next_deadline() <= START + 1 + PEER_SILENCE_LIMIT_SECONDS


def test_the_control_stream_carries_only_heartbeats() -> None:
    _, server = connected()
    closing = encode_frame(encode_message(Error("unavailable", "bye", {})))
    assert server.receive_control(closing, START) == [
        PeerClosed("the peer closed the session: bye")
    ]
    with pytest.raises(ProtocolError, match="only heartbeats"):
        server.receive_control(encode_frame(encode_message(Response({}))), START)
    with pytest.raises(ProtocolError):
        server.receive_control(encode_frame(encode_message(Heartbeat(1))), START)


def test_an_unpaired_session_left_idle_is_closed_and_a_busy_one_is_not() -> None:
    _requester, server = connected(paired=False)
    served = server.accept_stream(START)
    assert served is not None
    for beat in range(1, 40):
        server.receive_control(encode_frame(encode_message(Heartbeat(beat))), START + beat)
    assert server.check_alive(START + 39) is None
    server.close_stream(served, START + 39)
    late = START + 39 + server.limits.unpaired_idle_seconds + 1
    for beat in range(40, 80):
        server.receive_control(encode_frame(encode_message(Heartbeat(beat))), late - 0.5)
    idle = server.check_alive(late)
    assert idle is not None
    assert "idle" in idle.message


def test_sending_out_of_turn_is_a_local_error_not_the_peers() -> None:
    requester, server = connected()
    asked, served, _ = one_request(requester, server, {}, streaming=False)
    server.send_answer(served, {})
    with pytest.raises(LocalProtocolError):
        server.send_end(served)
    with pytest.raises(LocalProtocolError):
        requester.send_request(asked, "discover", {}, None, streaming=False)


def test_reset_codes_name_revocation_and_expiry() -> None:
    assert reset_code("grant_revoked") == GRANT_REVOKED_CODE == 4
    assert reset_code("grant_expired") == GRANT_EXPIRED_CODE == 5
    assert reset_code("unavailable") == 3


def test_the_largest_json_answer_is_a_grants_largest_response_and_its_envelope() -> None:
    assert MAX_RESPONSE_BYTES + MiB == MAX_JSON_ANSWER_BYTES


class TwoEnds(RuleBasedStateMachine):
    """A requester and a server: any sequence of requests, answers, cancels and reuse."""

    @initialize()
    def connect(self) -> None:
        self.requester, self.server = connected()
        self.now = START
        self.pairs: dict[int, int] = {}  # requester stream -> server stream
        self.streaming: dict[int, bool] = {}
        self.sent: dict[int, bytes] = {}
        self.received: dict[int, bytes] = {}
        self.idle: set[int] = set()

    def _to_server(self, asked: int, data: bytes, cuts: list[int]) -> list[Event]:
        return feed(self.server, self.pairs[asked], data, cuts, self.now)

    def _to_requester(self, asked: int, data: bytes, cuts: list[int]) -> list[Event]:
        events = feed(self.requester, asked, data, cuts, self.now)
        for event in events:
            if isinstance(event, DataReceived):
                self.received[asked] += event.data
        return events

    def _in(self, *states: StreamState) -> list[int]:
        return sorted(a for a in self.pairs if self.requester.state(a) in states)

    @rule(data=st.data(), streaming=st.booleans(), reuse=st.booleans())
    def send_a_request(self, data: st.DataObject, streaming: bool, reuse: bool) -> None:
        asked, stale = self.requester.take_idle_stream(self.now) if reuse else (None, [])
        for old in stale:  # kept too long: finished, and the server sees a clean end
            self.idle.discard(old)
            served = self.pairs.pop(old)
            assert self.server.receive(served, b"", self.now) == [StreamEnded(served)]
            self.server.close_stream(served, self.now)
        if asked is None:
            asked = self.requester.open_stream()
            served = self.server.accept_stream(self.now)
            assert served is not None
            self.pairs[asked] = served
        self.idle.discard(asked)
        frames = self.requester.send_request(asked, "op", {"n": asked}, None, streaming=streaming)
        cuts = data.draw(st.lists(st.integers(0, len(frames))), label="cuts")
        events = self._to_server(asked, frames, cuts)
        assert events == [RequestReceived(self.pairs[asked], events[0].request)]  # type: ignore[union-attr]
        self.streaming[asked] = streaming
        self.sent[asked] = self.received[asked] = b""

    @precondition(lambda self: self._in(StreamState.AWAITING_STREAM, StreamState.STREAMING))
    @rule(data=st.data(), piece=st.binary(max_size=64))
    def answer_a_chunk(self, data: st.DataObject, piece: bytes) -> None:
        asked = data.draw(
            st.sampled_from(self._in(StreamState.AWAITING_STREAM, StreamState.STREAMING))
        )
        self.sent[asked] += piece
        frames = self.server.send_chunk(self.pairs[asked], piece)
        self._to_requester(asked, frames, data.draw(st.lists(st.integers(0, len(frames)))))

    @precondition(lambda self: self._in(*ASKED_STATES))
    @rule(data=st.data(), refuse=st.booleans())
    def finish_an_answer(self, data: st.DataObject, refuse: bool) -> None:
        asked = data.draw(st.sampled_from(self._in(*ASKED_STATES)))
        served = self.pairs[asked]
        if refuse:
            frames = self.server.send_error(served, LimitExceeded("no", details={"limit": "x"}))
        elif self.streaming[asked]:
            frames = self.server.send_end(served)
        else:
            frames = self.server.send_answer(served, {"answer": asked})
        events = self._to_requester(asked, frames, data.draw(st.lists(st.integers(0, len(frames)))))
        self.server.answer_flushed(served, self.now)
        (last,) = events
        if refuse:
            assert isinstance(last, ErrorReceived)
            assert last.error.code == "limit_exceeded"
        elif self.streaming[asked]:
            assert last == AnswerEnded(asked)
            assert self.received[asked] == self.sent[asked]
        else:
            assert last == AnswerReceived(asked, {"answer": asked})

    @precondition(lambda self: self._in(*ASKED_STATES))
    @rule(data=st.data(), by_end=st.booleans())
    def abandon_a_request(self, data: st.DataObject, by_end: bool) -> None:
        asked = data.draw(st.sampled_from(self._in(*ASKED_STATES)))
        frames = b"" if by_end else self.requester.send_cancel(asked)
        served = self.pairs.pop(asked)
        assert self.server.receive(served, frames, self.now) == [RequestCancelled(served)]
        self.requester.close_stream(asked, self.now)
        self.server.close_stream(served, self.now)

    @precondition(lambda self: self._in(StreamState.IDLE))
    @rule(data=st.data())
    def put_a_stream_aside(self, data: st.DataObject) -> None:
        asked = data.draw(st.sampled_from(self._in(StreamState.IDLE)))
        if asked in self.idle:
            return
        if self.requester.release_stream(asked, self.now):
            self.idle.add(asked)
            return
        served = self.pairs.pop(asked)
        assert self.server.receive(served, b"", self.now) == [StreamEnded(served)]
        self.server.close_stream(served, self.now)

    @rule(seconds=st.floats(0, 3))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def both_ends_agree(self) -> None:
        expected = {
            StreamState.IDLE: {StreamState.IDLE},
            StreamState.AWAITING: {StreamState.REQUEST_RECEIVED},
            StreamState.AWAITING_STREAM: {StreamState.REQUEST_RECEIVED},
            StreamState.STREAMING: {StreamState.ANSWERING},
            StreamState.GATHERING: {StreamState.ANSWERING},
        }
        for asked, served in getattr(self, "pairs", {}).items():
            assert self.server.state(served) in expected[self.requester.state(asked)]
            if self.server.state(served) is not StreamState.IDLE:
                assert self.server.read_deadline(served) is None

    @invariant()
    def nothing_half_received_is_held(self) -> None:
        if hasattr(self, "server"):
            assert self.server._budget.held_bytes == 0
            assert self.requester._budget.held_bytes == 0


TwoEnds.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_two_ends_agree_through_any_sequence = TwoEnds.TestCase
# Seconds of exploration: `make test` runs it, `make unit` leaves it out.
test_two_ends_agree_through_any_sequence.pytestmark = [pytest.mark.slow]


@given(cut=st.integers(min_value=0, max_value=12))
def test_bytes_a_decoder_took_past_the_handshake_go_on_to_the_connection(cut: int) -> None:
    _, server = connected()
    beats = encode_frame(encode_message(Heartbeat(1))) + encode_frame(encode_message(Heartbeat(2)))
    earlier = FrameDecoder()  # the handshake's, which read into the first heartbeat
    assert earlier.feed(beats[:cut]) == []
    assert server.receive_control(earlier.unconsumed() + beats[cut:], START + 1) == []
    late = encode_frame(encode_message(Heartbeat(2)))
    with pytest.raises(ProtocolError, match="out of order"):  # both were heard, in order
        server.receive_control(late, START + 1)
