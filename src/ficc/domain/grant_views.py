"""A grant as its owner and its peer are shown it: the record with what it uses right now."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ficc.base.json_types import JSONObject
from ficc.base.times import format_time
from ficc.domain.grants import Grant, GrantState, GrantTerms


@dataclass(frozen=True, slots=True)
class GrantView:
    """A grant this cluster gives, at one moment: its state then, requests in flight, what is
    left and used, and its rate windows (``windows`` as the metering service shows them)."""

    id: str
    peer: str
    state: GrantState
    terms: GrantTerms
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    in_flight: int
    remaining: Mapping[str, int | None]
    used: Mapping[str, int]
    windows: Mapping[str, object]
    created_services: tuple[str, ...]
    created_models: tuple[str, ...]

    @classmethod
    def of(
        cls, grant: Grant, now: datetime, *, in_flight: int, windows: Mapping[str, object]
    ) -> GrantView:
        return cls(
            id=grant.id,
            peer=grant.peer_id,
            state=grant.state_at(now),
            terms=grant.terms,
            created_at=grant.created_at,
            expires_at=grant.expires_at,
            revoked_at=grant.revoked_at,
            in_flight=in_flight,
            remaining=grant.remaining(),
            used=grant.used(),
            windows=windows,
            created_services=tuple(sorted(grant.created_services)),
            created_models=tuple(sorted(grant.created_models)),
        )

    def to_json(self) -> JSONObject:
        """The contract's grant object, written once here because the owner's API and the
        peer's ``grants.list`` answer both show it (times as RFC 3339 strings)."""
        return {
            "id": self.id,
            "peer": self.peer,
            "state": self.state.value,
            **self.terms.view_json(),
            "created_at": format_time(self.created_at),
            "expires_at": format_time(self.expires_at),
            "revoked_at": None if self.revoked_at is None else format_time(self.revoked_at),
            "in_flight": self.in_flight,
            "remaining": dict(self.remaining),
            "used": dict(self.used),
            "windows": dict(self.windows),
            "created_services": list(self.created_services),
            "created_models": list(self.created_models),
        }


@dataclass(frozen=True, slots=True)
class RevokedGrantView:
    """A grant just revoked, and whether its peer acknowledged the revocation."""

    grant: GrantView
    told: bool
