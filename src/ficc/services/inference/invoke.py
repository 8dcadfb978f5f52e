"""One invocation of a service's OpenAI path: the local URL and a peer's ``inference.invoke``
both run it, so an OpenAI parameter or an engine quirk has one home.

In order: the request checked as OpenAI checks it; the service's replica with its spec's
runtime and options (from the router's memory, no transaction); what that runtime would not do
refused; the body the engine is sent; the answer, plain or streamed; the answer in OpenAI's
shape; and the caller's ``max_bytes`` (a grant's ``response_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from ficc.base.errors import LimitExceeded
from ficc.base.json_text import compact_size_gradually
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_answers import error_event, shape_answer, sse_event
from ficc.domain.openai_requests import EMBEDDINGS_PATH, check_request
from ficc.domain.openai_runtimes import check_capabilities, engine_body
from ficc.services.inference.records import Endpoint
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import EngineEvent


class Invocations:
    """Invokes a running service of a project; ``max_bytes`` bounds the answer when given."""

    def __init__(self, router: InvocationRouter) -> None:
        self._router = router

    async def complete(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        *,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        """The plain answer in OpenAI's shape.

        With ``max_bytes`` the text is counted while it arrives (an answer whose text alone
        passes it stops the engine at once), and the shaped answer is measured once.
        """
        endpoint, sent = await self._prepare(project, service_id, path, body)
        answer = await self._router.complete(
            project, service_id, path, sent, endpoint=endpoint, max_bytes=max_bytes
        )
        if path == EMBEDDINGS_PATH:
            # Vectors averaged (and measured) in a worker thread, value by value: tens of MiB
            # of floats would otherwise hold the loop for seconds.
            shaped, size = await asyncio.to_thread(
                shaped_answer, endpoint.runtime, path, body, answer, measure=max_bytes is not None
            )
        else:
            shaped = shape_answer(endpoint.runtime, path, body, answer)
            # Encoded as the caller's compatible URL will send it: the limit counts those bytes.
            size = 0 if max_bytes is None else len(json.dumps(shaped, separators=(",", ":")))
        if max_bytes is not None and size > max_bytes:
            raise LimitExceeded(
                f"the response is {size} bytes; the grant allows {max_bytes}",
                details={"limit": "response_bytes", "allowed": max_bytes},
            )
        return shaped

    @contextlib.asynccontextmanager
    async def stream(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        *,
        max_bytes: int | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """The engine's events as server-sent events; leaving the block stops the engine.

        With ``max_bytes`` the bytes sent are counted: the event that would pass it is replaced
        by an error event naming ``response_bytes``, and the stream ends.
        """
        endpoint, sent = await self._prepare(project, service_id, path, body)
        async with (
            self._router.stream(project, service_id, path, sent, endpoint=endpoint) as events,
            contextlib.aclosing(_framed(events, max_bytes)) as chunks,
        ):
            yield chunks

    async def _prepare(
        self, project: str, service_id: str, path: str, body: Mapping[str, Any]
    ) -> tuple[Endpoint, dict[str, Any]]:
        """The replica and the body its engine is sent, or the refusal naming the parameter.

        A caller's body (a hostile peer's too) is checked as OpenAI checks it and against
        what the service's runtime honours: never a silent drop.
        """
        check_request(path, body)
        endpoint = await self._router.endpoint(project, service_id)
        check_capabilities(endpoint.runtime, endpoint.options, path, body)
        return endpoint, engine_body(endpoint.runtime, path, body)


async def _framed(
    events: AsyncIterator[EngineEvent], max_bytes: int | None
) -> AsyncGenerator[bytes, None]:
    """Each event framed once; the bytes counted as they go, against ``max_bytes``."""
    sent = 0
    async for event in events:
        chunk = sse_event(event.data)
        if max_bytes is not None and sent + len(chunk) > max_bytes:
            yield error_event(
                LimitExceeded(
                    f"the response would pass the grant's {max_bytes} response bytes",
                    details={"limit": "response_bytes", "allowed": max_bytes},
                )
            )
            return
        sent += len(chunk)
        yield chunk


def shaped_answer(
    runtime: RuntimeName,
    path: str,
    body: Mapping[str, Any],
    answer: dict[str, Any],
    *,
    measure: bool = True,
) -> tuple[dict[str, Any], int]:
    """The answer in OpenAI's shape and (with ``measure``) its compact size, for a worker
    thread."""
    shaped = shape_answer(runtime, path, body, answer)
    return shaped, compact_size_gradually(shaped) if measure else 0
