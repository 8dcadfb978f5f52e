"""Grants: exact, limited, revocable access given to a peer. Validation, defaults and maxima.

"Defaults are one day, two concurrent requests, 1,000 total requests, no model transfer,
512 KiB request and 64 MiB inference response. Maximum lifetime is 30 days, concurrency 16,
requests 1,000,000, model allowance 16 TiB and response 256 MiB." (the Federation API)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final, TypedDict

from ficc.base.errors import InvalidInput
from ficc.base.units import DAY_SECONDS, KiB, MiB, TiB
from ficc.domain.scopes import REMOTE_SCOPES, parse_scopes

DEFAULT_LIFETIME_SECONDS: Final = 1 * DAY_SECONDS
MAX_LIFETIME_SECONDS: Final = 30 * DAY_SECONDS
DEFAULT_CONCURRENT: Final = 2
MAX_CONCURRENT: Final = 16
DEFAULT_REQUESTS: Final = 1_000
MAX_REQUESTS: Final = 1_000_000
DEFAULT_TRANSFER_BYTES: Final = 0
MAX_TRANSFER_BYTES: Final = 16 * TiB
DEFAULT_REQUEST_BYTES: Final = 512 * KiB
MAX_REQUEST_BYTES: Final = 64 * MiB  # the contract's bound: one request travels in memory
WIRE_GROWTH: Final = (21, 5)
"""How much larger than its limit a body may be on the wire, for the bounds applied before a
body is assembled. ``response_bytes`` counts a plain answer as compact JSON, which RFC 8785
grows at most 21/5 times (a double such as 1e+20 spelled in full, 21 characters for 5; nothing
else grows: non-ASCII text shrinks, UTF-8 against escapes). ``request_bytes`` counts RFC 8785
bytes, so for a request the factor is a margin."""
WIRE_ENVELOPE_BYTES: Final = 1 * KiB
"""Room for what surrounds a body on the wire: the grant ID, a ``mutation_id``, the names."""


def wire_bytes(json_bytes: int) -> int:
    """The most bytes a body of ``json_bytes`` (as ``request_bytes`` and
    ``response_bytes`` count) can take on the wire, envelope included: what the grantor lets
    follow a request before it knows the grant, what a requester takes as an answer."""
    grows, over = WIRE_GROWTH
    return -(-json_bytes * grows // over) + WIRE_ENVELOPE_BYTES


DEFAULT_RESPONSE_BYTES: Final = 64 * MiB
MAX_RESPONSE_BYTES: Final = 256 * MiB
# "Each grant can create at most 64 service records and 64 model records."
MAX_CREATED_SERVICES: Final = 64
MAX_CREATED_MODELS: Final = 64
# Metered grants: "tokens (1 .. 10^12: prompt + completion tokens over the grant's life),
# tokens_per_minute (1 .. 10^9) and requests_per_minute (1 .. 10^6), both over a rolling 60 s
# window. Absent or null = not limited by that rule."
MAX_TOKENS: Final = 10**12
MAX_TOKENS_PER_MINUTE: Final = 10**9
MAX_REQUESTS_PER_MINUTE: Final = 10**6
METERED_FIELDS: Final = ("tokens", "tokens_per_minute", "requests_per_minute")

GRANT_FIELDS: Final = frozenset(
    {
        "scopes",
        "services",
        "models",
        "nodes",
        "lifetime",
        "concurrent",
        "requests",
        "transfer_bytes",
        "request_bytes",
        "response_bytes",
        "stop_on_revoke",
        *METERED_FIELDS,
    }
)
ID_KINDS: Final = {"services": "svc", "models": "mdl", "nodes": "nod"}
_EXACT_ID = re.compile(r"^[a-z]{3}_[a-z2-7]{26}$")


class GrantState(StrEnum):
    """Active until revoked or past its lifetime (expired); retired once revoked or expired,
    its operation receipts gone."""

    ACTIVE = "active"
    REVOKED = "revoked"
    EXPIRED = "expired"
    RETIRED = "retired"


class _BaseTermsView(TypedDict):
    scopes: list[str]
    services: list[str]
    models: list[str]
    nodes: list[str]
    lifetime: int
    concurrent: int
    requests: int
    transfer_bytes: int
    request_bytes: int
    response_bytes: int
    stop_on_revoke: bool


class GrantTermsView(_BaseTermsView):
    """A grant's terms as the API shows them, every metered limit named."""

    tokens: int | None
    tokens_per_minute: int | None
    requests_per_minute: int | None


@dataclass(frozen=True)
class GrantTerms:
    """What a grant allows: scopes, exact resource IDs and limits."""

    scopes: frozenset[str]
    services: frozenset[str]
    models: frozenset[str]
    nodes: frozenset[str]
    lifetime: int
    concurrent: int
    requests: int
    transfer_bytes: int
    request_bytes: int
    response_bytes: int
    stop_on_revoke: bool
    tokens: int | None = None
    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None

    @property
    def metered(self) -> bool:
        """Whether any token or rate rule limits the grant."""
        return (
            self.tokens is not None
            or self.tokens_per_minute is not None
            or self.requests_per_minute is not None
        )

    @property
    def limits_tokens(self) -> bool:
        """Whether a token rule (``tokens`` or ``tokens_per_minute``) limits the grant."""
        return self.tokens is not None or self.tokens_per_minute is not None

    def to_json(self) -> dict[str, Any]:
        """The terms as receipts and storage keep them: a metered limit only when set, so
        a grant without one is byte for byte (and digest for digest) what it was before."""
        terms: dict[str, Any] = dict(self._base_json())
        for name in METERED_FIELDS:
            value = getattr(self, name)
            if value is not None:
                terms[name] = value
        return terms

    def view_json(self) -> GrantTermsView:
        """The terms as the API shows them: every metered limit named, ``null`` when unset
        (in the order of :data:`METERED_FIELDS`)."""
        return {
            **self._base_json(),
            "tokens": self.tokens,
            "tokens_per_minute": self.tokens_per_minute,
            "requests_per_minute": self.requests_per_minute,
        }

    def _base_json(self) -> _BaseTermsView:
        return {
            "scopes": sorted(self.scopes),
            "services": sorted(self.services),
            "models": sorted(self.models),
            "nodes": sorted(self.nodes),
            "lifetime": self.lifetime,
            "concurrent": self.concurrent,
            "requests": self.requests,
            "transfer_bytes": self.transfer_bytes,
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "stop_on_revoke": self.stop_on_revoke,
        }


def _count(data: Mapping[str, Any], name: str, default: int, maximum: int, minimum: int) -> int:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"grant.{name} must be an integer", field=f"grant.{name}")
    if not minimum <= value <= maximum:
        raise InvalidInput(
            f"grant.{name} must be between {minimum} and {maximum}",
            field=f"grant.{name}",
            details={"minimum": minimum, "maximum": maximum},
        )
    return value


def _optional_count(data: Mapping[str, Any], name: str, maximum: int) -> int | None:
    """A metered limit: absent or null is no limit, else a count from 1 to ``maximum``."""
    if data.get(name) is None:
        return None
    return _count(data, name, 1, maximum, 1)


def copied_term(
    terms: Mapping[str, object], name: str, default: int, maximum: int | None = None
) -> int:
    """A size in a requester's copy of a grant's terms, or ``default`` when the copy lacks it
    or it looks wrong (below 1, above ``maximum``): the grantor checks the term itself."""
    value = terms.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return default
    if maximum is not None and value > maximum:
        return default
    return value


def _ids(data: Mapping[str, Any], name: str) -> frozenset[str]:
    value = data.get(name, [])
    if not isinstance(value, list):
        raise InvalidInput(f"grant.{name} must be a list of exact IDs", field=f"grant.{name}")
    prefix = ID_KINDS[name] + "_"
    seen: set[str] = set()
    for index, item in enumerate(value):
        field = f"grant.{name}[{index}]"
        if not isinstance(item, str) or not _EXACT_ID.match(item) or not item.startswith(prefix):
            raise InvalidInput(
                f"{field} must be an exact {name[:-1]} ID ({prefix}…); there is no wildcard",
                field=field,
            )
        if item in seen:
            raise InvalidInput(f"{field} repeats {item}", field=field)
        seen.add(item)
    return frozenset(seen)


def parse_grant(data: object, *, requested_scopes: Iterable[str] | None = None) -> GrantTerms:
    """Check a GRANT object: types, defaults, maxima, the seven remote scopes, exact IDs.

    With ``requested_scopes`` (approval of an offer), the scopes must be a subset of them.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("grant must be an object", field="grant")
    unknown = sorted(set(data) - GRANT_FIELDS)
    if unknown:
        raise InvalidInput(f"grant.{unknown[0]} is not a known field", field=f"grant.{unknown[0]}")
    if "scopes" not in data:
        raise InvalidInput("grant.scopes is required", field="grant.scopes")
    scopes = parse_scopes(data["scopes"], field="grant.scopes", allowed=REMOTE_SCOPES)
    if requested_scopes is not None:
        extra = sorted(scopes - set(requested_scopes))
        if extra:
            raise InvalidInput(
                f"grant.scopes holds {extra[0]}, which the offer did not request",
                field="grant.scopes",
                details={"scope": extra[0]},
            )
    stop_on_revoke = data.get("stop_on_revoke", False)
    if not isinstance(stop_on_revoke, bool):
        raise InvalidInput("grant.stop_on_revoke must be a boolean", field="grant.stop_on_revoke")
    return GrantTerms(
        scopes=scopes,
        services=_ids(data, "services"),
        models=_ids(data, "models"),
        nodes=_ids(data, "nodes"),
        lifetime=_count(data, "lifetime", DEFAULT_LIFETIME_SECONDS, MAX_LIFETIME_SECONDS, 1),
        concurrent=_count(data, "concurrent", DEFAULT_CONCURRENT, MAX_CONCURRENT, 1),
        requests=_count(data, "requests", DEFAULT_REQUESTS, MAX_REQUESTS, 1),
        transfer_bytes=_count(
            data, "transfer_bytes", DEFAULT_TRANSFER_BYTES, MAX_TRANSFER_BYTES, 0
        ),
        request_bytes=_count(data, "request_bytes", DEFAULT_REQUEST_BYTES, MAX_REQUEST_BYTES, 1),
        response_bytes=_count(
            data, "response_bytes", DEFAULT_RESPONSE_BYTES, MAX_RESPONSE_BYTES, 1
        ),
        stop_on_revoke=stop_on_revoke,
        tokens=_optional_count(data, "tokens", MAX_TOKENS),
        tokens_per_minute=_optional_count(data, "tokens_per_minute", MAX_TOKENS_PER_MINUTE),
        requests_per_minute=_optional_count(data, "requests_per_minute", MAX_REQUESTS_PER_MINUTE),
    )


@dataclass(frozen=True)
class Grant:
    """A grant this cluster gave a peer, with what it has used."""

    id: str
    project: str
    peer_id: str
    terms: GrantTerms
    state: GrantState
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    requests_used: int
    transfer_bytes_used: int
    created_services: frozenset[str] = frozenset()
    created_models: frozenset[str] = frozenset()
    prompt_tokens_used: int = 0
    completion_tokens_used: int = 0
    tokens_reserved: int = 0
    """Tokens held by requests in flight: reserved at admission, settled when each ends."""

    def state_at(self, now: datetime) -> GrantState:
        """Lifetime expiry makes an active grant expired at ``expires_at``."""
        if self.state == GrantState.ACTIVE and now >= self.expires_at:
            return GrantState.EXPIRED
        return self.state

    @property
    def tokens_used(self) -> int:
        return self.prompt_tokens_used + self.completion_tokens_used

    def remaining_tokens(self) -> int | None:
        """Tokens a new request may still reserve (settled and reserved ones taken); None
        when the grant does not limit tokens."""
        if self.terms.tokens is None:
            return None
        return max(self.terms.tokens - self.tokens_used - self.tokens_reserved, 0)

    def remaining(self) -> dict[str, int | None]:
        return {
            "requests": max(self.terms.requests - self.requests_used, 0),
            "transfer_bytes": max(self.terms.transfer_bytes - self.transfer_bytes_used, 0),
            "tokens": self.remaining_tokens(),
        }

    def used(self) -> dict[str, int]:
        return {
            "requests": self.requests_used,
            "prompt_tokens": self.prompt_tokens_used,
            "completion_tokens": self.completion_tokens_used,
            "transfer_bytes": self.transfer_bytes_used,
        }

    def covers(self, kind: str, resource_id: str) -> bool:
        """Whether an exact resource ID is in the grant (or was created through it)."""
        if kind == "services":
            return resource_id in self.terms.services or resource_id in self.created_services
        if kind == "models":
            return resource_id in self.terms.models or resource_id in self.created_models
        return resource_id in self.terms.nodes


def expiry_of(created_at: datetime, terms: GrantTerms) -> datetime:
    return created_at + timedelta(seconds=terms.lifetime)
