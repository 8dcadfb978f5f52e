"""Inference services as the API and the console show them to their owner."""

from __future__ import annotations

from collections.abc import Iterable

from ficc.base.json_types import JSONObject
from ficc.domain.service_records import ServiceView


def render_service(view: ServiceView) -> JSONObject:
    """The contract's service object (the receipt keeps the same one, hence the domain's)."""
    return view.to_json()


def render_services(views: Iterable[ServiceView]) -> list[JSONObject]:
    """Each service's object, in the order the service listed them."""
    return [render_service(view) for view in views]
