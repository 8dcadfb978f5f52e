"""Offers: the transition table, expiry seven days after sending, and labels a person can trust.

The expiry rule is tested here with a fake clock; tests/e2e/test_pairing_expiry.py keeps the
promise that both clusters see it over the real transport.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from tests.support.fakes.clock import FakeClock

from ficc.base.errors import Conflict
from ficc.domain import offers
from ficc.domain.offers import (
    CLOCK_SKEW_SECONDS,
    MAX_LABEL_CHARS,
    OFFER_LIFETIME_SECONDS,
    PURGE_GRACE_SECONDS,
    TRANSITIONS,
    Offer,
    OfferDirection,
    OfferState,
    clean_label,
    next_state,
    purge_before,
)

STATES = [
    OfferState.SENT,
    OfferState.RECEIVED,
    OfferState.APPROVED,
    OfferState.ACCEPTED,
    OfferState.FINISHED,
    OfferState.DISCARDED,
]
EVENTS = ["receipt", "approve", "finish", "discard"]


def offer(clock: FakeClock, direction: str, state: str) -> Offer:
    return Offer(
        id="off_" + "a" * 26,
        direction=direction,
        project="default",
        other_hypernet_id="b" * 64,
        peer_label=None,
        peer_cluster_key=None,
        scopes=frozenset({"discover"}),
        state=state,
        revision=1,
        receipt=None,
        ticket=None,
        created_at=clock(),
        expires_at=offers.expiry(clock()),
    )


@pytest.mark.parametrize("direction", [OfferDirection.OUTGOING, OfferDirection.INCOMING])
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("event", EVENTS)
def test_every_direction_state_and_event_follows_the_table(
    direction: str, state: str, event: str
) -> None:
    clock = FakeClock()
    target = TRANSITIONS.get((direction, state, event))
    if target is None:
        with pytest.raises(Conflict) as refused:
            next_state(offer(clock, direction, state), event, clock())
        assert refused.value.details == {"state": state, "event": event}
    else:
        assert next_state(offer(clock, direction, state), event, clock()) == target


@pytest.mark.parametrize(
    ("direction", "state"),
    [(OfferDirection.OUTGOING, OfferState.SENT), (OfferDirection.INCOMING, OfferState.RECEIVED)],
)
def test_an_unanswered_offer_expires_seven_days_after_it_was_sent(
    direction: str, state: str
) -> None:
    clock = FakeClock()
    sent = offer(clock, direction, state)
    clock.advance(OFFER_LIFETIME_SECONDS - 1)
    assert sent.state_at(clock()) == state
    clock.advance(1)
    assert sent.state_at(clock()) == OfferState.EXPIRED
    # The requester still takes the answer for the clock skew the two clusters may have.
    clock.advance(CLOCK_SKEW_SECONDS)
    for event in EVENTS:
        with pytest.raises(Conflict) as refused:
            next_state(sent, event, clock())
        assert refused.value.details["state"] == OfferState.EXPIRED


def test_an_offer_approved_in_time_does_not_expire() -> None:
    clock = FakeClock()
    approved = replace(
        offer(clock, OfferDirection.INCOMING, OfferState.RECEIVED), state=OfferState.APPROVED
    )
    clock.advance(OFFER_LIFETIME_SECONDS * 10)
    assert approved.state_at(clock()) == OfferState.APPROVED
    assert next_state(approved, "finish", clock()) == OfferState.FINISHED


def test_expired_offers_are_purged_only_after_the_grace() -> None:
    clock = FakeClock()
    assert purge_before(clock()) == clock() - timedelta(seconds=PURGE_GRACE_SECONDS)
    assert {OfferState.SENT, OfferState.RECEIVED, OfferState.DISCARDED} == offers.PURGEABLE_STATES


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("  Alpha   cluster ", "Alpha cluster"),
        ("evil\u202egnp.exe", "evilgnp.exe"),
        ("tab\tand\nnewline", "tab and newline"),
        ("\u200b\u200b", None),
        ("", None),
        (42, None),
        ("x" * (MAX_LABEL_CHARS + 50), "x" * MAX_LABEL_CHARS),
    ],
)
def test_labels_lose_unseen_characters_and_are_bounded(raw: object, shown: str | None) -> None:
    assert clean_label(raw) == shown
