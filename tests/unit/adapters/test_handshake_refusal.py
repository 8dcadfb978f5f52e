"""A handshake refused while we were still writing: the peer's close, not its error frame,
reaches us first, and it must read as the same refusal (the replay test met this race)."""

from __future__ import annotations

from ficc.adapters.hypernet.handshake import _refusal
from ficc.base.errors import PeerUnreachable, ProtocolError

CLOSED = (
    "STREAM: ConnectionLost(ApplicationClosed(ApplicationClose { error_code: 2, "
    'reason: b"the peer\'s challenge nonce was seen before (a replay)" }))'
)


def test_a_protocol_close_met_while_writing_reads_as_the_peers_refusal() -> None:
    failure = PeerUnreachable(f"writing to the peer: {CLOSED}", details={"transport": CLOSED})
    refusal = _refusal(failure)
    assert isinstance(refusal, ProtocolError)
    assert refusal.message == (
        "the peer refused the handshake: the peer's challenge nonce was seen before (a replay)"
    )
    assert refusal.details == {"peer_code": "protocol_error"}


def test_any_other_lost_connection_stays_unreachable() -> None:
    other = CLOSED.replace("error_code: 2", "error_code: 0")
    for detail in (other, "CONNECTION: TimedOut", None):
        failure = PeerUnreachable("writing to the peer", details={"transport": detail})
        assert _refusal(failure) is None
