"""Offers, from either side of a pairing, as the API and the console show them."""

from __future__ import annotations

from collections.abc import Iterable

from ficc.base.json_types import JSONObject
from ficc.base.times import format_time
from ficc.domain.offers import ApprovedOfferView, DiscardedOfferView, OfferView


def render_offer(view: OfferView) -> JSONObject:
    """The contract's offer object; ``receipt`` null until approval."""
    return {
        "id": view.id,
        "direction": view.direction.value,
        "service": view.service,
        "requester": view.requester,
        "label": view.label,
        "cluster_key": view.cluster_key,
        "scopes": list(view.scopes),
        "state": view.state.value,
        "revision": view.revision,
        "receipt": None if view.receipt is None else dict(view.receipt),
        "expires_at": format_time(view.expires_at),
        "peer": view.peer,
        "project": view.project,
    }


def render_offers(views: Iterable[OfferView]) -> list[JSONObject]:
    """Each offer's object, in the order the service listed them."""
    return [render_offer(view) for view in views]


def render_approved_offer(view: ApprovedOfferView) -> JSONObject:
    """An approved offer's object, and whether its receipt reached the requester."""
    return {**render_offer(view.offer), "receipt_delivered": view.receipt_delivered}


def render_discarded_offer(view: DiscardedOfferView) -> JSONObject:
    """A discarded offer's object, and whether the other side was told."""
    return {**render_offer(view.offer), "told": view.told}
