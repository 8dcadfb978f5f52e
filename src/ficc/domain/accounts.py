"""Users, API tokens, browser sessions and login links: the records and their rules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from ficc.base.errors import InvalidInput
from ficc.base.units import DAY_SECONDS, HOUR_SECONDS, MINUTE_SECONDS

MAX_TOKEN_LIFETIME_SECONDS: Final = 365 * DAY_SECONDS
SESSION_LIFETIME_SECONDS: Final = 12 * HOUR_SECONDS
LOGIN_LINK_LIFETIME_SECONDS: Final = 5 * MINUTE_SECONDS
MAX_USERNAME_CHARS: Final = 64
MAX_PASSWORD_CHARS: Final = 1024
OWNER_USERNAME: Final = "owner"


@dataclass(frozen=True)
class User:
    id: str
    username: str
    password_hash: str | None
    is_owner: bool
    scopes: frozenset[str]
    projects: frozenset[str]
    created_at: datetime


@dataclass(frozen=True)
class ApiToken:
    id: str
    user_id: str
    secret_hash: str
    scopes: frozenset[str]
    projects: frozenset[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def usable_at(self, now: datetime) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or now < self.expires_at


@dataclass(frozen=True)
class WebSession:
    id: str
    user_id: str
    secret_hash: str
    csrf_token: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class LoginLink:
    id: str
    user_id: str
    secret_hash: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None


def parse_lifetime_seconds(value: object, *, field: str = "lifetime") -> int | None:
    """None means no expiry; otherwise 1 s to one year."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be an integer number of seconds", field=field)
    if not 1 <= value <= MAX_TOKEN_LIFETIME_SECONDS:
        raise InvalidInput(
            f"{field} must be between 1 and {MAX_TOKEN_LIFETIME_SECONDS} seconds", field=field
        )
    return value
