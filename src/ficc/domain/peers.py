"""Peers: other clusters paired with this one, under a pairing generation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NotRequired, TypedDict

from ficc.base.json_types import JSONObject
from ficc.domain.offers import OfferView


class PeerState(StrEnum):
    PENDING = "pending"
    PAIRED = "paired"
    REMOVED = "removed"


class PeerRole(StrEnum):
    """Which side of the pairing this cluster is."""

    REQUESTER = "requester"
    """We asked for access: the peer is the service's cluster and grants us."""
    SERVICE = "service"
    """The peer asked us: we approved its offer and grant it access."""


@dataclass(frozen=True)
class Peer:
    id: str
    project: str
    label: str | None
    hypernet_id: str
    cluster_key: str
    state: PeerState
    generation: int
    role: PeerRole
    offer_id: str | None
    selected_grant: str | None
    ticket: str | None
    created_at: datetime
    updated_at: datetime


class PeerView(TypedDict):
    """A pairing as this cluster shows it, with the copies of the grants the peer gives us
    (as the peer last listed them: open JSON)."""

    id: str
    label: str | None
    hypernet_id: str
    cluster_key: str
    state: PeerState
    role: PeerRole
    generation: int
    remote_grants: list[JSONObject]
    selected: str | None
    created_at: datetime
    updated_at: datetime


class RemovedPeerView(TypedDict):
    """A removed pairing, and whether the peer acknowledged its end."""

    peer: PeerView
    told: bool


class PairingView(TypedDict):
    """A finished pairing: the offer that made it and the peer it made."""

    offer: OfferView
    peer: PeerView


class ForgottenPeerView(TypedDict):
    """A forgotten pairing; with its audit erased, the rows that became tombstones."""

    peer: str
    forgotten: bool
    tombstoned: NotRequired[list[int]]
