"""Users, API tokens, browser sessions and login links: the records and their rules."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypedDict

from ficc.base.errors import InvalidInput, LimitExceeded
from ficc.base.units import DAY_SECONDS, HOUR_SECONDS, MINUTE_SECONDS

MAX_TOKEN_LIFETIME_SECONDS: Final = 365 * DAY_SECONDS
SESSION_LIFETIME_SECONDS: Final = 12 * HOUR_SECONDS
"""A browser session over https."""
PLAIN_HTTP_SESSION_LIFETIME_SECONDS: Final = HOUR_SECONDS
"""A browser session over plain HTTP: browsers send a host's cookies to every port of it, so
any other server on the same host name may receive this one (RFC 6265 section 8.5)."""
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
    owner: bool = False
    """The token ``ficc init`` wrote to ``owner.token``: the only token that is the local owner."""
    created_by: str | None = None
    """The token that minted this one; None when the owner's session or the socket did."""

    def usable_at(self, now: datetime) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or now < self.expires_at


class TokenView(TypedDict):
    """A token as ``GET /api/v1/tokens`` shows it: never its secret."""

    id: str
    state: str
    scopes: list[str]
    projects: list[str]
    owner: bool
    created_by: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


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


ADDRESS_FREE_FAILURES: Final = 3
"""Wrong passwords one client address may send before it must wait between tries."""
ADDRESS_MAX_BACKOFF_SECONDS: Final = 15 * MINUTE_SECONDS
GLOBAL_FREE_FAILURES: Final = 20
"""Wrong passwords from all addresses together, in a row, before every address that has sent
a wrong one must wait (an address with none never waits for others' failures)."""
GLOBAL_MAX_BACKOFF_SECONDS: Final = MINUTE_SECONDS
MAX_LOGINS_IN_FLIGHT: Final = 4
"""Password checks running at once, over all addresses (each costs ~64 MiB of Argon2 memory)."""
MAX_TRACKED_ADDRESSES: Final = 10_000


@dataclass
class _Failures:
    count: int = 0
    last_at: datetime | None = None

    def wait_seconds(self, now: datetime, free: int, cap_seconds: int) -> float:
        """Seconds still to wait: 1, 2, 4 ... (at most ``cap_seconds``) after the free tries."""
        if self.count < free or self.last_at is None:
            return 0.0
        backoff = min(float(cap_seconds), 2.0 ** (self.count - free))
        return max(0.0, backoff - (now - self.last_at).total_seconds())


class LoginThrottle:
    """Who may try a password now: per client address and over all addresses.

    Failures in a row make the next try wait 1 s, 2 s, 4 s ... after a few free ones; a success
    clears its address (and the global count). The global wait holds only addresses that have
    failed themselves: otherwise anyone could keep the owner out with one wrong try a minute
    from anywhere, while an attacker spreading its guesses over many addresses still gets one
    free guess per new address once the global count is up. One try at a time per address and
    a few in total, so a flood is refused before any slow hash runs. Time is a parameter: no
    clock here.
    """

    def __init__(self) -> None:
        self._addresses: OrderedDict[str, _Failures] = OrderedDict()
        self._global = _Failures()
        self._in_flight: set[str] = set()

    def begin(self, address: str, now: datetime) -> None:
        """Admit one try from ``address`` or refuse it with the limit and the wait named."""
        if address in self._in_flight:
            raise _refused(
                "login_attempts_per_address", 1.0, "a login from this address is in progress"
            )
        if len(self._in_flight) >= MAX_LOGINS_IN_FLIGHT:
            raise _refused("logins_in_flight", 1.0, "too many logins are in progress")
        mine = self._addresses.get(address)
        if mine is not None:
            wait = mine.wait_seconds(now, ADDRESS_FREE_FAILURES, ADDRESS_MAX_BACKOFF_SECONDS)
            if wait > 0:
                raise _refused(
                    "login_failures_per_address", wait, "too many wrong passwords from this address"
                )
            wait = self._global.wait_seconds(now, GLOBAL_FREE_FAILURES, GLOBAL_MAX_BACKOFF_SECONDS)
            if wait > 0:
                raise _refused("login_failures", wait, "too many wrong passwords on this cluster")
        self._in_flight.add(address)

    def end(self, address: str, now: datetime, *, succeeded: bool) -> None:
        """Close the try ``begin`` admitted, counting a failure or clearing the counts."""
        self._in_flight.discard(address)
        if succeeded:
            self._addresses.pop(address, None)
            self._global = _Failures()
            return
        mine = self._addresses.pop(address, None) or _Failures()
        mine.count += 1
        mine.last_at = now
        self._addresses[address] = mine  # most recent last: the oldest are forgotten first
        while len(self._addresses) > MAX_TRACKED_ADDRESSES:
            self._addresses.popitem(last=False)
        self._global.count += 1
        self._global.last_at = now


def _refused(limit: str, wait_seconds: float, why: str) -> LimitExceeded:
    retry_after = max(1, math.ceil(wait_seconds))
    return LimitExceeded(
        f"{why}; try again in {retry_after} s",
        details={"limit": limit, "retry_after_seconds": retry_after},
    )
