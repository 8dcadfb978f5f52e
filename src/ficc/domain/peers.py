"""Peers: other clusters paired with this one, under a pairing generation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NotRequired, TypedDict

from ficc.domain.offers import OfferView
from ficc.domain.remote_grants import RemoteGrant


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


@dataclass(frozen=True, slots=True)
class PeerView:
    """A pairing as this cluster shows it, with its copies of the grants the peer gives us."""

    id: str
    label: str | None
    hypernet_id: str
    cluster_key: str
    state: PeerState
    role: PeerRole
    generation: int
    remote_grants: tuple[RemoteGrant, ...]
    selected: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, peer: Peer, remote_grants: Iterable[RemoteGrant]) -> PeerView:
        return cls(
            id=peer.id,
            label=peer.label,
            hypernet_id=peer.hypernet_id,
            cluster_key=peer.cluster_key,
            state=peer.state,
            role=peer.role,
            generation=peer.generation,
            remote_grants=tuple(remote_grants),
            selected=peer.selected_grant,
            created_at=peer.created_at,
            updated_at=peer.updated_at,
        )


@dataclass(frozen=True, slots=True)
class RemovedPeerView:
    """A removed pairing, and whether the peer acknowledged its end."""

    peer: PeerView
    told: bool


@dataclass(frozen=True, slots=True)
class PairingView:
    """A finished pairing: the offer that made it and the peer it made."""

    offer: OfferView
    peer: PeerView


class ForgottenPeerView(TypedDict):
    """A forgotten pairing; with its audit erased, the rows that became tombstones."""

    peer: str
    forgotten: bool
    tombstoned: NotRequired[list[int]]
