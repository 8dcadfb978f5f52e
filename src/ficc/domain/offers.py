"""Offers: a request to pair, from the requester to the service's cluster, and its states.

Outgoing (requester): sent → accepted (receipt received) → finished; or discarded, expired.
Incoming (service side): received → approved (receipt signed) → finished; or discarded, expired.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from ficc.base.errors import Conflict
from ficc.base.json_types import JSONObject
from ficc.base.units import DAY_SECONDS

# "Offers not approved within 7 days expire."
OFFER_LIFETIME_SECONDS: Final = 7 * DAY_SECONDS
CLOCK_SKEW_SECONDS: Final = 300
"""How far the two clusters' clocks may disagree about an offer's expiry."""
PURGE_GRACE_SECONDS: Final = 1 * DAY_SECONDS
"""An offer never approved is deleted this long after it expired (its ID stays tombstoned)."""
MAX_RECEIVED_OFFERS_PER_HYPERNET_ID: Final = 4
"""Unapproved incoming offers one HyperNet ID may have waiting; one more evicts its oldest."""
MAX_RECEIVED_OFFERS_PER_SOURCE: Final = 16
"""The same for one source address (an IPv4 address, an IPv6 /64): fresh HyperNet IDs cost
nothing, addresses do. One more evicts the source's oldest waiting offer."""
MAX_RECEIVED_OFFERS: Final = 256
"""Unapproved incoming offers from everyone together; one more evicts the oldest waiting offer
of the source holding the most, so a flood evicts its own offers, never a newcomer's (G5)."""
MAX_LABEL_CHARS: Final = 100
DEFAULT_OFFERS_PAGE: Final = 100
MAX_OFFERS_PAGE: Final = 500
_UNSHOWN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
"""Control, format (bidi overrides and isolates, zero-width), private, unassigned characters
and line separators: what can make a label read differently from what it is."""


class OfferDirection(StrEnum):
    """Which side of an offer this cluster is: the requester's or the service's."""

    OUTGOING = "outgoing"
    INCOMING = "incoming"


class OfferState(StrEnum):
    """Where an offer is on the paths drawn in this module's docstring."""

    SENT = "sent"
    RECEIVED = "received"
    APPROVED = "approved"
    ACCEPTED = "accepted"
    FINISHED = "finished"
    DISCARDED = "discarded"
    EXPIRED = "expired"


OPEN_STATES: Final = frozenset(
    {OfferState.SENT, OfferState.RECEIVED, OfferState.APPROVED, OfferState.ACCEPTED}
)
PURGEABLE_STATES: Final = frozenset({OfferState.SENT, OfferState.RECEIVED, OfferState.DISCARDED})
"""States of offers that no pairing refers to: they go once expired past the grace."""

# (direction, state, event) → next state
TRANSITIONS: Final[dict[tuple[OfferDirection, OfferState, str], OfferState]] = {
    (OfferDirection.OUTGOING, OfferState.SENT, "receipt"): OfferState.ACCEPTED,
    (OfferDirection.OUTGOING, OfferState.ACCEPTED, "receipt"): OfferState.ACCEPTED,
    (OfferDirection.OUTGOING, OfferState.SENT, "finish"): OfferState.FINISHED,
    (OfferDirection.OUTGOING, OfferState.ACCEPTED, "finish"): OfferState.FINISHED,
    (OfferDirection.OUTGOING, OfferState.SENT, "discard"): OfferState.DISCARDED,
    (OfferDirection.INCOMING, OfferState.RECEIVED, "approve"): OfferState.APPROVED,
    (OfferDirection.INCOMING, OfferState.RECEIVED, "discard"): OfferState.DISCARDED,
    (OfferDirection.INCOMING, OfferState.APPROVED, "finish"): OfferState.FINISHED,
}
"""Only an offer not yet approved is discarded: once approved, the other side may already
have finished (its answer lost), so an approved pairing ends by removing its peer."""


@dataclass(frozen=True)
class Offer:
    id: str
    direction: OfferDirection
    project: str | None
    other_hypernet_id: str
    """The HyperNet ID of the other side: the service's cluster (outgoing), the requester's
    (incoming)."""
    peer_label: str | None
    peer_cluster_key: str | None
    scopes: frozenset[str]
    state: OfferState
    revision: int
    receipt: JSONObject | None
    ticket: str | None
    created_at: datetime
    expires_at: datetime
    peer_id: str | None = None
    source: str | None = None
    """Where an incoming offer came from (see :func:`offer_source`)."""

    def state_at(self, now: datetime) -> OfferState:
        if self.state in (OfferState.SENT, OfferState.RECEIVED) and now >= self.expires_at:
            return OfferState.EXPIRED
        return self.state


@dataclass(frozen=True, slots=True)
class OfferView:
    """An offer as either side shows it (``GET /offers/{id}``): its fields name the
    requester and the service whichever side this cluster is."""

    id: str
    direction: OfferDirection
    service: str | None
    requester: str | None
    label: str | None
    cluster_key: str | None
    scopes: tuple[str, ...]
    state: OfferState
    revision: int
    receipt: Mapping[str, object] | None
    expires_at: datetime
    peer: str | None
    project: str | None

    @classmethod
    def of(cls, offer: Offer, now: datetime, me: str | None) -> OfferView:
        """``offer`` from this cluster's side at ``now``; ``me`` is this cluster's HyperNet ID
        (None: no companion runs)."""
        outgoing = offer.direction == OfferDirection.OUTGOING
        return cls(
            id=offer.id,
            direction=offer.direction,
            service=offer.other_hypernet_id if outgoing else me,
            requester=me if outgoing else offer.other_hypernet_id,
            label=offer.peer_label,
            cluster_key=offer.peer_cluster_key,
            scopes=tuple(sorted(offer.scopes)),
            state=offer.state_at(now),
            revision=offer.revision,
            receipt=offer.receipt,
            expires_at=offer.expires_at,
            peer=offer.peer_id,
            project=offer.project,
        )


@dataclass(frozen=True, slots=True)
class ApprovedOfferView:
    """An approved offer, and whether its receipt reached the requester."""

    offer: OfferView
    receipt_delivered: bool


@dataclass(frozen=True, slots=True)
class DiscardedOfferView:
    """A discarded offer, and whether the other side acknowledged the discard."""

    offer: OfferView
    told: bool


def next_state(offer: Offer, event: str, now: datetime) -> OfferState:
    """The state after ``event``, or Conflict naming what the offer's state allows.

    The requester takes the answer to its offer for :data:`CLOCK_SKEW_SECONDS` past its own
    expiry: the service side approved before the expiry by its clock, which may run behind.
    """
    state = offer.state_at(now)
    if (
        state == OfferState.EXPIRED
        and (offer.direction, offer.state) == (OfferDirection.OUTGOING, OfferState.SENT)
        and event in ("receipt", "finish")
        and now < offer.expires_at + timedelta(seconds=CLOCK_SKEW_SECONDS)
    ):
        state = OfferState.SENT
    target = TRANSITIONS.get((offer.direction, state, event))
    if target is None:
        raise Conflict(
            f"this {offer.direction} offer is {state}; '{event}' is not possible now",
            details={"state": state, "event": event},
        )
    return target


def expiry(created_at: datetime) -> datetime:
    return created_at + timedelta(seconds=OFFER_LIFETIME_SECONDS)


def purge_before(now: datetime) -> datetime:
    """Offers in a purgeable state that expired before this moment are deleted."""
    return now - timedelta(seconds=PURGE_GRACE_SECONDS)


def offer_source(hypernet_id: str, source: str | None) -> str:
    """The source an incoming offer is counted under: its sender's source address, else (the
    transport did not know it) the sender's HyperNet ID."""
    return source or hypernet_id


def clean_label(value: object) -> str | None:
    """A label a person can trust at approval time: unseen and reordering characters removed,
    runs of whitespace made one space, at most ``MAX_LABEL_CHARS``; ``None`` when nothing is
    left or it is not text."""
    if not isinstance(value, str):
        return None
    shown = "".join(
        " " if char.isspace() else char
        for char in unicodedata.normalize("NFC", value)
        if char.isspace() or unicodedata.category(char) not in _UNSHOWN_CATEGORIES
    )
    cleaned = " ".join(shown.split())[:MAX_LABEL_CHARS].strip()
    return cleaned or None
