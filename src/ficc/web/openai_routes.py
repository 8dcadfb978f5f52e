"""What both OpenAI-compatible URLs (the local and the federated) share: the POST routes, one
per engine path, with the same names, documents and fast path; and OpenAI's ``model`` object."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastapi import APIRouter, Response

from ficc.domain.openai_requests import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH
from ficc.domain.openai_responses import RESPONSES_PATH
from ficc.web.fast_routes import fast_path
from ficc.web.schemas import openai_request
from ficc.web.schemas_responses import OPENAI_INVOCATION

ENGINE_PATH_PREFIX: Final = "/v1"
"""Each engine path's first segment; each compatible URL's prefix ends with it already."""

INVOCATIONS: Final = (
    ("chat_completions", CHAT_COMPLETIONS_PATH),
    ("completions", COMPLETIONS_PATH),
    ("embeddings", EMBEDDINGS_PATH),
    ("responses", RESPONSES_PATH),
)
"""Each route's name (its OpenAPI operation's) and the engine path it invokes, in route order."""


def add_invocation_routes(
    router: APIRouter, prefix: str, endpoint: Callable[[str], Callable[..., Awaitable[Response]]]
) -> None:
    """Add one fast POST route per engine path under ``prefix``, served by ``endpoint(path)``."""
    for name, path in INVOCATIONS:
        router.add_api_route(
            prefix + path.removeprefix(ENGINE_PATH_PREFIX),
            fast_path(endpoint(path)),
            methods=["POST"],
            name=name,
            responses=OPENAI_INVOCATION,
            openapi_extra=openai_request(path),
        )


def openai_model(model_id: str, created: int, owner: str) -> dict[str, Any]:
    """OpenAI's ``model`` object: ``created`` in seconds since the epoch."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": owner}
