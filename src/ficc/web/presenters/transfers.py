"""Transfers as the API and the console show them to the acquiring project."""

from __future__ import annotations

from collections.abc import Iterable

from ficc.base.json_types import JSONObject
from ficc.base.times import format_time
from ficc.domain.transfers import TransferView


def render_transfer(view: TransferView) -> JSONObject:
    """The contract's transfer object; each file in its one shape, shown as it is stored."""
    return {
        "id": view.id,
        "peer": view.peer,
        "model": view.model,
        "grant": view.grant,
        "sha256": view.sha256,
        "state": view.state.value,
        "bytes_done": view.bytes_done,
        "bytes_total": view.bytes_total,
        "rate_bytes_per_second": view.rate_bytes_per_second,
        "files": [dict(f.to_json()) for f in view.files],
        "local_model": view.local_model,
        "error": view.error,
        "created_at": format_time(view.created_at),
        "updated_at": format_time(view.updated_at),
    }


def render_transfers(views: Iterable[TransferView]) -> list[JSONObject]:
    """Each transfer's object, in the order the service listed them."""
    return [render_transfer(view) for view in views]
