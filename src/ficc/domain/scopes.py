"""Local and remote scopes, and the rules that check them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ficc.base.errors import InvalidInput

LOCAL_SCOPES: Final = (
    "federation:read",
    "federation:manage",
    "federation:invoke",
    "discover",
    "inference:read",
    "inference:invoke",
    "inference:manage",
    "models:read",
    "models:transfer",
    "models:manage",
    "resources:read",
    "projects:manage",
    "tokens:manage",
)

LOCAL_ONLY_SCOPES: Final = frozenset(
    {
        "federation:read",
        "federation:manage",
        "federation:invoke",
        "inference:read",
        "projects:manage",
        "tokens:manage",
    }
)
"""Scopes a grant never carries: a peer acts only through the remote scopes."""

# "Remote scopes are discover, inference:invoke, inference:manage, models:read,
# models:transfer, models:manage, resources:read."
REMOTE_SCOPES: Final = tuple(scope for scope in LOCAL_SCOPES if scope not in LOCAL_ONLY_SCOPES)


def parse_scopes(
    values: object, *, field: str = "scopes", allowed: Iterable[str] = LOCAL_SCOPES
) -> frozenset[str]:
    """A non-empty list of known scope names, without duplicates."""
    allowed_set = set(allowed)
    if not isinstance(values, list) or not values:
        raise InvalidInput(f"{field} must be a non-empty list of scope names", field=field)
    seen: set[str] = set()
    for index, value in enumerate(values):
        if not isinstance(value, str) or value not in allowed_set:
            raise InvalidInput(
                f"{field}[{index}] must be one of: {', '.join(sorted(allowed_set))}",
                field=f"{field}[{index}]",
            )
        if value in seen:
            raise InvalidInput(f"{field}[{index}] repeats {value}", field=f"{field}[{index}]")
        seen.add(value)
    return frozenset(seen)
