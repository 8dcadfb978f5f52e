"""Remote grants: this cluster's copies of the grants its peers give it.

A copy is the peer's word, open JSON as the peer last listed it (``grants.list``), and is
shown as listed. What this cluster acts on (which services a grant publishes, what transfer
allowance it has left) is read from the copy here, once, and checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ficc.base.json_types import JSONObject
from ficc.base.times import parse_time
from ficc.domain.grants import GrantState


@dataclass(frozen=True, slots=True)
class RemoteGrant:
    """A grant a peer gives us: the copy (``listed``) and the fields read from it."""

    id: str | None
    state: str | None
    services: tuple[str, ...]
    """The service IDs it publishes, given and created, sorted (none when it lists none)."""
    remaining_transfer_bytes: int | None
    listed: Mapping[str, object]

    @classmethod
    def of(cls, listed: Mapping[str, object]) -> RemoteGrant:
        """The copy as the peer listed it."""
        grant_id = listed.get("id")
        state = listed.get("state")
        remaining = listed.get("remaining")
        left = remaining.get("transfer_bytes") if isinstance(remaining, dict) else None
        return cls(
            id=grant_id if isinstance(grant_id, str) else None,
            state=state if isinstance(state, str) else None,
            services=tuple(
                sorted({*_ids(listed.get("services")), *_ids(listed.get("created_services"))})
            ),
            remaining_transfer_bytes=left if isinstance(left, int) else None,
            listed=listed,
        )

    @classmethod
    def as_of(cls, listed: Mapping[str, object], now: datetime) -> RemoteGrant:
        """The copy as it stands at ``now``: an active one past its expiry is expired."""
        expires_at = listed.get("expires_at")
        if listed.get("state") != GrantState.ACTIVE or not isinstance(expires_at, str):
            return cls.of(listed)
        try:
            expired = parse_time(expires_at) <= now
        except ValueError:
            return cls.of(listed)
        return cls.of({**listed, "state": GrantState.EXPIRED} if expired else listed)

    def to_json(self) -> JSONObject:
        """The copy, shown as the peer listed it."""
        return dict(self.listed)


def _ids(value: object) -> list[str]:
    """The IDs a copy lists under one name (none when it lists none)."""
    return [name for name in value if isinstance(name, str)] if isinstance(value, list) else []
