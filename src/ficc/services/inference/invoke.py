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
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from ficc.base.errors import EngineUnavailable, LimitExceeded
from ficc.domain.inference import RuntimeName
from ficc.domain.openai_answers import error_event, shape_answer, sse_event
from ficc.domain.openai_requests import EMBEDDINGS_PATH, check_request
from ficc.domain.openai_runtimes import check_capabilities, engine_body
from ficc.protocol.canonical import canonical_json_and_compact_size
from ficc.services.inference.records import Endpoint
from ficc.services.inference.router import InvocationRouter
from ficc.services.ports import EngineEvent


class Invocations:
    """Invokes a running service of a project; ``max_bytes`` bounds the answer when given."""

    def __init__(self, router: InvocationRouter) -> None:
        self._router = router

    async def complete(
        self, project: str, service_id: str, path: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The plain answer in OpenAI's shape."""
        endpoint, answer = await self._answer(project, service_id, path, body, None)
        if path == EMBEDDINGS_PATH:
            # Vectors averaged in a worker thread: tens of MiB of floats would hold the loop.
            return await asyncio.to_thread(shape_answer, endpoint.runtime, path, body, answer)
        return shape_answer(endpoint.runtime, path, body, answer)

    async def encoded(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        *,
        max_bytes: int,
    ) -> bytes:
        """The plain answer in OpenAI's shape as RFC 8785 JSON (as the wire carries it), whose
        compact JSON (as the caller's compatible URL sends it) is at most ``max_bytes``.

        The text is counted while it arrives (an answer whose text alone passes ``max_bytes``
        stops the engine at once); the shaped answer is measured from the one encoding that
        sends it on.
        """
        endpoint, answer = await self._answer(project, service_id, path, body, max_bytes)
        if path == EMBEDDINGS_PATH:
            # Averaged, encoded and measured in a worker thread, value by value: tens of MiB
            # of floats would otherwise hold the loop for seconds.
            content, size = await asyncio.to_thread(
                encoded_answer, endpoint.runtime, path, body, answer, gradual=True
            )
        else:
            content, size = encoded_answer(endpoint.runtime, path, body, answer)
        # Counted as the caller's compatible URL will send it (compact JSON, ASCII escapes).
        if size > max_bytes:
            raise LimitExceeded(
                f"the response is {size} bytes; the grant allows {max_bytes}",
                details={"limit": "response_bytes", "allowed": max_bytes},
            )
        return content

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

    async def _answer(
        self,
        project: str,
        service_id: str,
        path: str,
        body: Mapping[str, Any],
        max_bytes: int | None,
    ) -> tuple[Endpoint, dict[str, Any]]:
        endpoint, sent = await self._prepare(project, service_id, path, body)
        answer = await self._router.complete(
            project, service_id, path, sent, endpoint=endpoint, max_bytes=max_bytes
        )
        return endpoint, answer

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


def encoded_answer(
    runtime: RuntimeName,
    path: str,
    body: Mapping[str, Any],
    answer: dict[str, Any],
    *,
    gradual: bool = False,
) -> tuple[bytes, int]:
    """The answer in OpenAI's shape as RFC 8785 JSON, and the size of its compact JSON (what
    ``response_bytes`` counts); ``gradual`` in a worker thread.

    An engine's answer the wire cannot carry (a NaN, an integer past 2**53) is the engine's
    failure.
    """
    shaped = shape_answer(runtime, path, body, answer)
    try:
        return canonical_json_and_compact_size(shaped, gradual=gradual)
    except ValueError as exc:
        raise EngineUnavailable("the engine's answer holds a value JSON cannot carry") from exc
