"""Peers, with their copies of the grants they give us, as the API and the console show them."""

from __future__ import annotations

from collections.abc import Iterable

from ficc.base.json_types import JSONObject
from ficc.base.times import format_time
from ficc.domain.peers import PairingView, PeerView, RemovedPeerView
from ficc.web.presenters.offers import render_offer


def render_peer(view: PeerView) -> JSONObject:
    """The contract's peer object; each remote grant shown as the peer listed it."""
    return {
        "id": view.id,
        "label": view.label,
        "hypernet_id": view.hypernet_id,
        "cluster_key": view.cluster_key,
        "state": view.state.value,
        "role": view.role.value,
        "generation": view.generation,
        "remote_grants": [copy.to_json() for copy in view.remote_grants],
        "selected": view.selected,
        "created_at": format_time(view.created_at),
        "updated_at": format_time(view.updated_at),
    }


def render_peers(views: Iterable[PeerView]) -> list[JSONObject]:
    """Each peer's object, in the order the service listed them."""
    return [render_peer(view) for view in views]


def render_removed_peer(view: RemovedPeerView) -> JSONObject:
    """A removed peer's object, and whether the peer was told."""
    return {"peer": render_peer(view.peer), "told": view.told}


def render_pairing(view: PairingView) -> JSONObject:
    """A finished pairing: the offer that made it and the peer it made."""
    return {"offer": render_offer(view.offer), "peer": render_peer(view.peer)}
