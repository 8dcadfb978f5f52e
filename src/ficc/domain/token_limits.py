"""Restricted local tokens: which peers and services a token may reach, and its own budgets.

"``POST /tokens`` also takes ``peers`` (peer IDs), ``services`` (service IDs or route names),
``tokens``, ``tokens_per_minute``, ``requests_per_minute`` (all optional; absent = not
restricted by that rule)." A token minted by a restricted token is at most as broad: its lists
are subsets of its creator's (absent: the creator's), its budgets no larger, and what it spends
counts against its creator's too (``parent``). Pure rules: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from ficc.base.errors import InvalidInput, PermissionDenied
from ficc.base.ids import parse_id
from ficc.domain.grants import MAX_REQUESTS_PER_MINUTE, MAX_TOKENS, MAX_TOKENS_PER_MINUTE
from ficc.domain.metering import GrantStanding

MAX_LISTED: Final = 256
"""The most peers or services one token may list."""
MAX_NAME_CHARS: Final = 200
"""A service ID or a route name (route names are shorter; IDs far shorter)."""
BUDGET_FIELDS: Final = (
    ("tokens", MAX_TOKENS),
    ("tokens_per_minute", MAX_TOKENS_PER_MINUTE),
    ("requests_per_minute", MAX_REQUESTS_PER_MINUTE),
)
RULE_PREFIX: Final = "token."
"""How a refusal names a token's rule in ``details.limit``: ``token.tokens`` and so on."""


@dataclass(frozen=True)
class TokenRestrictions:
    """A token's restrictions; None in a field: not restricted by that rule."""

    peers: frozenset[str] | None = None
    services: frozenset[str] | None = None
    tokens: int | None = None
    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None
    parent: str | None = None
    """The restricted token that minted this one: its budgets count this one's use too."""

    @property
    def any(self) -> bool:
        """Whether any rule restricts the token (or its creator's do)."""
        return self.parent is not None or any(
            value is not None
            for value in (
                self.peers,
                self.services,
                self.tokens,
                self.tokens_per_minute,
                self.requests_per_minute,
            )
        )

    @property
    def limits_tokens(self) -> bool:
        return self.tokens is not None or self.tokens_per_minute is not None

    def admits_peer(self, peer_id: str) -> bool:
        return self.peers is None or peer_id in self.peers

    def admits_service(self, *names: str | None) -> bool:
        """Whether any of ``names`` (a service ID, a route's name or ID) is listed."""
        return self.services is None or any(n in self.services for n in names if n)

    def to_json(self) -> dict[str, Any]:
        return {
            "peers": None if self.peers is None else sorted(self.peers),
            "services": None if self.services is None else sorted(self.services),
            "tokens": self.tokens,
            "tokens_per_minute": self.tokens_per_minute,
            "requests_per_minute": self.requests_per_minute,
        }


@dataclass(frozen=True)
class TokenLimit:
    """A restricted token's row: its rules and what it used and holds (as a grant's row)."""

    token_id: str
    restrictions: TokenRestrictions
    standing: GrantStanding

    def remaining(self) -> dict[str, int | None]:
        """What the token's own budget leaves (its creator's may leave less)."""
        limit = self.restrictions.tokens
        return {"tokens": None if limit is None else self.standing.tokens_left(limit)}


def _names(value: object, field: str, *, kind: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"{field} must be a non-empty list", field=field)
    if len(value) > MAX_LISTED:
        raise InvalidInput(
            f"{field} may list at most {MAX_LISTED} entries",
            field=field,
            details={"maximum": MAX_LISTED},
        )
    names: set[str] = set()
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if kind is not None:
            names.add(parse_id(kind, item, field=where))
            continue
        if not isinstance(item, str) or not 1 <= len(item) <= MAX_NAME_CHARS:
            raise InvalidInput(
                f"{where} must be a service ID or a route name of 1 to {MAX_NAME_CHARS} characters",
                field=where,
            )
        names.add(item)
    return frozenset(names)


def _budget(value: object, field: str, maximum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidInput(
            f"{field} must be an integer between 1 and {maximum}",
            field=field,
            details={"minimum": 1, "maximum": maximum},
        )
    return value


def parse_restrictions(data: Mapping[str, Any]) -> TokenRestrictions:
    """The restrictions asked at creation, or the contract's 400 naming the field."""
    return TokenRestrictions(
        peers=_names(data.get("peers"), "peers", kind="peer"),
        services=_names(data.get("services"), "services", kind=None),
        tokens=_budget(data.get("tokens"), "tokens", MAX_TOKENS),
        tokens_per_minute=_budget(
            data.get("tokens_per_minute"), "tokens_per_minute", MAX_TOKENS_PER_MINUTE
        ),
        requests_per_minute=_budget(
            data.get("requests_per_minute"), "requests_per_minute", MAX_REQUESTS_PER_MINUTE
        ),
    )


def narrowed(
    asked: TokenRestrictions, creator: TokenRestrictions | None, creator_id: str | None
) -> TokenRestrictions:
    """What a token minted by a (possibly restricted) creator holds: at most as broad.

    A list the creator has and the new token omits is the creator's; one that names an entry
    beyond the creator's is refused (403, as a scope beyond the creator's is). A budget larger
    than the creator's is refused the same way; one omitted is the creator's to bound, through
    ``parent``: the creator's budgets count what the new token spends.
    """
    if creator is None or not creator.any:
        return asked
    peers = _within("peers", asked.peers, creator.peers)
    services = _within("services", asked.services, creator.services)
    for name, _maximum in BUDGET_FIELDS:
        limit: int | None = getattr(creator, name)
        wanted_budget: int | None = getattr(asked, name)
        if limit is not None and wanted_budget is not None and wanted_budget > limit:
            raise _broader(name, f"{name} is {wanted_budget}; its creator's is {limit}")
    return replace(asked, peers=peers, services=services, parent=creator_id)


def _within(
    name: str, wanted: frozenset[str] | None, mine: frozenset[str] | None
) -> frozenset[str] | None:
    """A list of the new token: the creator's when it omits one, never beyond it."""
    if mine is None:
        return wanted
    if wanted is None:
        return mine
    beyond = sorted(wanted - mine)
    if beyond:
        raise _broader(name, f"{name} lists {beyond[0]}, which its creator may not reach")
    return wanted


def _broader(name: str, why: str) -> PermissionDenied:
    return PermissionDenied(
        f"a token cannot be broader than its creator: {why}",
        details={"field": name, "restriction": RULE_PREFIX + name},
    )


def peer_refusal(peer_id: str) -> PermissionDenied:
    return PermissionDenied(
        f"this token may not call the peer {peer_id}",
        details={"restriction": RULE_PREFIX + "peers", "peer": peer_id},
    )


def service_refusal(service: str) -> PermissionDenied:
    return PermissionDenied(
        f"this token may not use the service {service}",
        details={"restriction": RULE_PREFIX + "services", "service": service},
    )
