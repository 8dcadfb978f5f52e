"""The offer state table: what each side may do with an offer in each state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ficc.base.errors import Conflict
from ficc.domain import offers as o
from ficc.domain.offers import OfferDirection, OfferState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def offer(direction: str, state: str) -> o.Offer:
    return o.Offer(
        id="off_x",
        direction=direction,
        project="default",
        other_hypernet_id="a" * 64,
        peer_label=None,
        peer_cluster_key=None,
        scopes=frozenset({"discover"}),
        state=state,
        revision=1,
        receipt=None,
        ticket=None,
        created_at=NOW,
        expires_at=NOW + timedelta(days=7),
    )


@pytest.mark.parametrize(
    ("direction", "state"),
    [(OfferDirection.OUTGOING, OfferState.SENT), (OfferDirection.INCOMING, OfferState.RECEIVED)],
)
def test_an_offer_not_yet_approved_is_discarded(direction: str, state: str) -> None:
    assert o.next_state(offer(direction, state), "discard", NOW) == OfferState.DISCARDED


@pytest.mark.parametrize(
    ("direction", "state"),
    [
        (OfferDirection.OUTGOING, OfferState.ACCEPTED),
        (OfferDirection.INCOMING, OfferState.APPROVED),
        (OfferDirection.OUTGOING, OfferState.FINISHED),
        (OfferDirection.INCOMING, OfferState.FINISHED),
    ],
)
def test_an_approved_offer_is_not_discarded(direction: str, state: str) -> None:
    with pytest.raises(Conflict) as refused:
        o.next_state(offer(direction, state), "discard", NOW)
    assert refused.value.details == {"state": state, "event": "discard"}


def test_an_approved_offer_is_finished_on_both_sides() -> None:
    assert (
        o.next_state(offer(OfferDirection.OUTGOING, OfferState.ACCEPTED), "finish", NOW)
        == OfferState.FINISHED
    )
    assert (
        o.next_state(offer(OfferDirection.INCOMING, OfferState.APPROVED), "finish", NOW)
        == OfferState.FINISHED
    )


def test_the_requester_takes_an_answer_within_the_clock_skew_past_its_own_expiry() -> None:
    sent = offer(OfferDirection.OUTGOING, OfferState.SENT)
    skew = timedelta(seconds=o.CLOCK_SKEW_SECONDS)
    late = sent.expires_at + skew - timedelta(seconds=1)
    assert sent.state_at(late) == OfferState.EXPIRED
    assert o.next_state(sent, "receipt", late) == OfferState.ACCEPTED
    assert o.next_state(sent, "finish", late) == OfferState.FINISHED
    with pytest.raises(Conflict):
        o.next_state(sent, "discard", late)
    for too_late in (sent.expires_at + skew, sent.expires_at + 2 * skew):
        with pytest.raises(Conflict) as refused:
            o.next_state(sent, "receipt", too_late)
        assert refused.value.details == {"state": OfferState.EXPIRED, "event": "receipt"}


def test_the_service_side_approves_only_before_its_own_expiry() -> None:
    received = offer(OfferDirection.INCOMING, OfferState.RECEIVED)
    with pytest.raises(Conflict):
        o.next_state(received, "approve", received.expires_at)
    assert o.next_state(received, "approve", received.expires_at - timedelta(seconds=1)) == (
        OfferState.APPROVED
    )
