"""The OpenAI-compatible POST routes, one per engine path, as both compatible URLs (the local
and the federated) register them: the same names, documents and fast path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

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
