"""Peers: other clusters paired with this one, under a pairing generation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

PENDING: Final = "pending"
PAIRED: Final = "paired"
REMOVED: Final = "removed"

REQUESTER: Final = "requester"
"""We asked for access: the peer is the service's cluster and grants us."""
SERVICE: Final = "service"
"""The peer asked us: we approved its offer and grant it access."""


@dataclass(frozen=True)
class Peer:
    id: str
    project: str
    label: str | None
    hypernet_id: str
    cluster_key: str
    state: str
    generation: int
    role: str
    offer_id: str | None
    selected_grant: str | None
    ticket: str | None
    created_at: datetime
    updated_at: datetime
