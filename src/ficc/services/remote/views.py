"""What a peer is shown: services without their secrets, refusals as SSE events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ficc.base.errors import NotFound
from ficc.base.json_types import JSONObject
from ficc.base.times import with_times_formatted


def unpublished(service: object) -> NotFound:
    """The refusal of a model that is not a service the selected grant publishes."""
    return NotFound(
        f"the model {service} is not a service published by this peer's selected grant",
        details={"field": "model"},
    )


PEER_SPEC_FIELDS: Final = ("name", "model", "runtime", "node", "replicas", "restart")
"""What a peer sees of a spec: ``options`` may hold upstream URLs and internal names."""
PEER_SERVICE_ERROR: Final = "the service failed; the grantor's operator can see why"
"""A failed service's reason holds engine text, addresses and paths; a peer sees only this."""


def peer_view(view: Mapping[str, object]) -> JSONObject:
    """A service as a peer sees it: no options, engine error text, log lines, PIDs or ports."""
    shown = {k: v for k, v in view.items() if k not in {"replicas", "spec", "error"}}
    spec = view.get("spec")
    if isinstance(spec, dict):
        shown["spec"] = {k: spec[k] for k in PEER_SPEC_FIELDS if k in spec}
    if "error" in view:
        shown["error"] = None if view["error"] is None else PEER_SERVICE_ERROR
    replicas = view.get("replicas", [])
    shown["replicas"] = [
        {"replica": r["replica"], "state": r["state"], "exit_code": r["exit_code"]}
        for r in (replicas if isinstance(replicas, list) else [])
        if isinstance(r, dict)
    ]
    plain: JSONObject = with_times_formatted(shown)
    return plain


def peer_answer(result: Mapping[str, object]) -> Mapping[str, object]:
    """A mutation's result as the peer is answered: a service in its view, anything else as is.

    A peer's receipts keep this answer, so a replay (and ``operation.status``) shows the peer
    what it was shown the first time, and nothing of the owner's view."""
    return peer_view(result) if "spec" in result else result


MAX_SPEC_DEPTH: Final = 16


def upstream_in_spec(spec_data: object) -> str | None:
    """The field of a peer's spec that names an upstream: ``runtime: openai``, a ``base_url``
    key or a URL value anywhere in ``options``; None when there is none."""
    if not isinstance(spec_data, dict):
        return None
    if spec_data.get("runtime") == "openai":
        return "body.spec.runtime"

    def search(value: object, where: str, depth: int) -> str | None:
        if depth > MAX_SPEC_DEPTH:
            return where
        if isinstance(value, str):
            return where if "://" in value else None
        items: list[tuple[str, object]] = []
        if isinstance(value, dict):
            for key, item in value.items():
                if str(key).lower() == "base_url":
                    return f"{where}.{key}"
                items.append((f"{where}.{key}", item))
        elif isinstance(value, list):
            items = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
        for path, item in items:
            found = search(item, path, depth + 1)
            if found is not None:
                return found
        return None

    return search(spec_data.get("options"), "body.spec.options", 0)
