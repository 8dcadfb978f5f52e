"""What each side is told when a request does not end in its answer."""

from __future__ import annotations

from ficc.base.errors import (
    EngineUnavailable,
    GrantExpired,
    GrantRevoked,
    NotFound,
    OutcomeUnknown,
    PeerUnreachable,
)
from ficc.protocol.outcomes import INTERNAL, ending, refusal, unanswered
from ficc.protocol.stream_states import FAILED_CODE, GRANT_EXPIRED_CODE, GRANT_REVOKED_CODE


def test_a_handlers_error_is_told_with_its_code_and_a_bug_as_internal_only() -> None:
    engine_down = refusal(
        EngineUnavailable("the engine cannot be reached", details={"engine": "down"})
    )
    assert (engine_down.code, engine_down.details) == ("engine_unavailable", {"engine": "down"})
    assert refusal(NotFound("no such thing")).code == "not_found"
    assert refusal(KeyError("secret")) == INTERNAL  # nothing of the bug leaves the cluster


def test_an_ended_request_is_told_by_a_frame_or_when_none_can_go_by_a_reset_naming_it() -> None:
    revoked = GrantRevoked("the grant was revoked")
    told = ending(revoked, torn=False)
    assert told.frame is not None
    assert told.frame.code == "grant_revoked"
    assert told.code == GRANT_REVOKED_CODE
    cut = ending(GrantExpired("the grant expired"), torn=True)
    assert (cut.frame, cut.code) == (None, GRANT_EXPIRED_CODE)
    assert ending(PeerUnreachable("gone"), torn=True).code == FAILED_CODE


def test_a_request_sent_but_unanswered_is_unknown_and_one_never_sent_unavailable() -> None:
    lost = unanswered("inference.create", "no answer within 30 s", sent=True)
    assert isinstance(lost, OutcomeUnknown)
    assert "inference.create" in lost.message
    unsent = unanswered("inference.create", "no stream", sent=False)
    assert isinstance(unsent, PeerUnreachable)
    assert unsent.message == "the request was not sent: no stream"
