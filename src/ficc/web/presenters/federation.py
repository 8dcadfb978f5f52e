"""A project's federation overview (``GET /api/v1/federation``) as the API shows it."""

from __future__ import annotations

from ficc.base.json_types import JSONObject
from ficc.services.federation.overview import FederationView
from ficc.web.presenters.grants import render_grants
from ficc.web.presenters.offers import render_offers
from ficc.web.presenters.peers import render_peers
from ficc.web.presenters.transfers import render_transfers


def render_federation(view: FederationView) -> JSONObject:
    """The overview's object in the contract's key order, each typed part rendered."""
    return {
        "companion": dict(view.companion),
        "identity": dict(view.identity),
        "project": view.project,
        "peers": render_peers(view.peers),
        "offers": render_offers(view.offers),
        "offers_next": view.offers_next,
        "grants": render_grants(view.grants),
        "transfers": render_transfers(view.transfers),
    }
