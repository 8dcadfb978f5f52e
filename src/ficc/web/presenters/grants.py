"""Grants this cluster gives, as the API and the console show them to their owner."""

from __future__ import annotations

from collections.abc import Iterable

from ficc.base.json_types import JSONObject
from ficc.domain.grant_views import GrantView, RevokedGrantView


def render_grant(view: GrantView) -> JSONObject:
    """The contract's grant object (the peer's ``grants.list`` shows the same, hence the
    domain's)."""
    return view.to_json()


def render_grants(views: Iterable[GrantView]) -> list[JSONObject]:
    """Each grant's object, in the order the service listed them."""
    return [render_grant(view) for view in views]


def render_revoked_grant(view: RevokedGrantView) -> JSONObject:
    """A revoked grant's object, and whether its peer was told."""
    return {**render_grant(view.grant), "told": view.told}
