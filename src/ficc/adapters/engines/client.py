"""A client for one OpenAI-compatible engine that always asks it to stream.

llama.cpp's server does not cancel a plain (non-streaming) request when its client goes away; a
streamed one stops within a second of the connection closing. So every request is sent with
``"stream": true``: streaming callers get the events as they arrive, plain callers get the JSON
object assembled from them (:mod:`ficc.adapters.engines.plain`), and closing either closes the
engine's response at once. The HTTP connections are :mod:`ficc.adapters.engines.transport`'s.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import aiohttp

from ficc.adapters.engines.closing import ClosedOnExit
from ficc.adapters.engines.errors import status_error, transport_error
from ficc.adapters.engines.plain import (
    assembled_answer,
    decoded_embeddings,
    embeddings_limit,
    finished_response,
)
from ficc.adapters.engines.sse import EMPTY_STREAM, EngineStream
from ficc.adapters.engines.transport import (
    DEFAULT_TIMEOUT,
    OK,
    EngineBody,
    EngineConnections,
    EngineTimeout,
    read_bounded,
    read_pieces,
)
from ficc.adapters.engines.usage import PROBE_DEADLINE_SECONDS, UsageProbe, plain_probe
from ficc.base.errors import EngineUnavailable, FiccError, InvalidInput
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    INFERENCE_PATHS,
    usage_requested,
)
from ficc.domain.openai_responses import RESPONSES_PATH

__all__ = [
    "ALLOWED_PATHS",
    "CHAT_COMPLETIONS",
    "COMPLETIONS",
    "DEFAULT_TIMEOUT",
    "EMBEDDINGS",
    "MAX_MODELS_BODY_BYTES",
    "MODELS",
    "EngineClient",
    "EngineTimeout",
]

CHAT_COMPLETIONS: Final = CHAT_COMPLETIONS_PATH
COMPLETIONS: Final = COMPLETIONS_PATH
EMBEDDINGS: Final = EMBEDDINGS_PATH
MODELS: Final = "/v1/models"
ALLOWED_PATHS: Final = INFERENCE_PATHS | {RESPONSES_PATH}
"""The only paths a caller can reach on an engine; everything else the engine serves is private.
``/v1/responses`` is sent only to a runtime that serves it (vLLM); others get chat requests."""

MAX_MODELS_BODY_BYTES: Final = 1024 * 1024
"""A model list is a few hundred bytes; a megabyte is a hostile or broken server."""
MODELS_DEADLINE_SECONDS: Final = 10.0
"""The whole ``/v1/models`` answer, however slowly it drips, arrives within this."""


def _check_path(path: str) -> None:
    if path not in ALLOWED_PATHS:
        allowed = ", ".join(sorted(ALLOWED_PATHS))
        raise InvalidInput(f"the engine path {path!r} is not allowed (allowed: {allowed})")


class EngineClient(ClosedOnExit):
    """Talks to one engine at ``base_url`` (its root, without ``/v1``), loopback or upstream.

    ``model``, when given, replaces the request's ``model``: the engine answers to that name only,
    and llama.cpp's server echoes its model file's path when a request names no model.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: EngineTimeout = DEFAULT_TIMEOUT,
    ) -> None:
        self._model = model
        headers = {} if api_key is None else {"Authorization": f"Bearer {api_key}"}
        self._http = EngineConnections(base_url.rstrip("/"), headers, timeout)
        self._usage = UsageProbe(self._post_json, model)
        """Counts usage where the engine streams none (see :class:`UsageProbe`)."""

    async def aclose(self) -> None:
        """Close every connection to the engine."""
        await self._http.aclose()

    async def list_models(self) -> dict[str, Any]:
        """``GET /v1/models``: the engine's health check as much as a listing.

        Read as a stream, at most :data:`MAX_MODELS_BODY_BYTES` within
        :data:`MODELS_DEADLINE_SECONDS`: the URL may be an upstream FICC does not control.
        """
        try:
            async with (
                asyncio.timeout(MODELS_DEADLINE_SECONDS),
                self._http.exchange("GET", MODELS) as response,
            ):
                if response.status != OK:
                    raise status_error(response.status, await read_bounded(response))
                body = await read_bounded(response, MAX_MODELS_BODY_BYTES + 1)
        except TimeoutError as exc:
            raise EngineUnavailable("the engine did not answer in time") from exc
        if len(body) > MAX_MODELS_BODY_BYTES:
            raise EngineUnavailable(
                f"the engine's model list is over {MAX_MODELS_BODY_BYTES} bytes"
            )
        try:
            value = json.loads(body)
        except ValueError as exc:
            raise EngineUnavailable("the engine's model list is not JSON") from exc
        if not isinstance(value, dict):
            raise EngineUnavailable("the engine's model list is not a JSON object")
        return value

    async def open_stream(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> EngineStream:
        """Send ``body`` to ``path`` as a streaming request; errors arrive before any event.

        The caller must close the result (``async with``) — closing is what cancels, and runs
        ``on_close`` (not run when this raises).
        """
        _check_path(path)
        if path == EMBEDDINGS:
            raise InvalidInput("embeddings are answered whole, never streamed", field="stream")
        request_body = dict(body)
        request_body["stream"] = True
        if self._model is not None:
            request_body["model"] = self._model
        response = await self._http.send("POST", path, request_body)
        if response.status != OK:
            try:
                content = await read_bounded(response)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise transport_error(exc) from exc
            finally:
                response.close()
            raise status_error(response.status, content)
        engine_body = EngineBody(response)

        async def release(suspect: bool) -> None:
            # An answer the engine finished but that failed: llama.cpp's server can leave such
            # a connection dead, so it never carries the next request.
            if suspect:
                engine_body.discard()

        counter = self._usage.counter(path, body) if usage_requested(body) else None
        why_empty = functools.partial(self._why_empty, path, body)
        stream = EngineStream(
            engine_body, path, counter, on_close, release=release, why_empty=why_empty
        )
        await stream.start()
        return stream

    async def _why_empty(self, path: str, body: Mapping[str, Any]) -> FiccError:
        """Why the engine ended a stream without any event: llama.cpp's server says it only to
        a plain request (a prompt past the context is refused before any token): asked so, for
        one token, within :data:`PROBE_DEADLINE_SECONDS`."""
        try:
            async with (
                asyncio.timeout(PROBE_DEADLINE_SECONDS),
                self._http.exchange("POST", path, plain_probe(body, self._model)) as response,
            ):
                if response.status != OK:
                    return status_error(response.status, await read_bounded(response))
        except (FiccError, TimeoutError):
            pass
        return EngineUnavailable(EMPTY_STREAM)

    async def complete(
        self, path: str, body: Mapping[str, Any], *, max_bytes: int | None = None
    ) -> dict[str, Any]:
        """A plain response object, assembled from a streamed one so that a cancel stops it.

        The engine is asked for usage in its stream (OpenAI and vLLM send it); where it sends
        none, the engine counts it (see :class:`UsageProbe`). ``max_bytes``: the answer's
        text is counted while it arrives; once the text alone passes it, the whole answer
        would too, and the engine is stopped at once.
        """
        if path == EMBEDDINGS:
            return await self._embeddings(body, max_bytes)
        if path == RESPONSES_PATH:
            async with await self.open_stream(RESPONSES_PATH, body) as stream:
                return await finished_response(stream, max_bytes)
        request_body = dict(body)
        request_body["stream_options"] = {"include_usage": True}
        async with await self.open_stream(path, request_body) as stream:
            return await assembled_answer(stream, path, max_bytes)

    async def _embeddings(
        self, body: Mapping[str, Any], max_bytes: int | None = None
    ) -> dict[str, Any]:
        """``POST /v1/embeddings``, answered whole (nothing to cancel mid-way), read within
        FICC's bound and within ``max_bytes`` (a grant's ``response_bytes``: the engine's
        answer counts as it arrives, before any vector is averaged)."""
        request_body = dict(body)
        if self._model is not None:
            request_body["model"] = self._model
        limit = embeddings_limit(max_bytes)
        async with self._http.exchange("POST", EMBEDDINGS, request_body) as response:
            if response.status != OK:
                raise status_error(response.status, await read_bounded(response))
            pieces = await read_pieces(response, limit + 1)
        return await decoded_embeddings(pieces, limit)

    async def count_tokens(self, text: str) -> int | None:
        """The tokens of ``text`` by the engine's own tokenizer (llama.cpp's server counts
        them without generating anything), within :data:`PROBE_DEADLINE_SECONDS`; None where
        the engine cannot say."""
        try:
            async with asyncio.timeout(PROBE_DEADLINE_SECONDS):
                return await self._usage.tokenizer_count(text)
        except (FiccError, ValueError, KeyError, TypeError, TimeoutError):
            return None

    async def _post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """A small JSON answer, read within :data:`MAX_MODELS_BODY_BYTES` (ValueError past it,
        the engine's error where it refused)."""
        async with self._http.exchange("POST", path, body) as response:
            if response.status != OK:
                raise status_error(response.status, await read_bounded(response))
            content = await read_bounded(response, MAX_MODELS_BODY_BYTES + 1)
        if len(content) > MAX_MODELS_BODY_BYTES:
            raise ValueError("the engine's answer is too large")
        return json.loads(content)
