"""A client for one OpenAI-compatible engine that always asks it to stream.

llama.cpp's server does not cancel a plain (non-streaming) request when its client goes away; a
streamed one stops within a second of the connection closing. So every request is sent with
``"stream": true``: streaming callers get the events as they arrive, plain callers get the JSON
object assembled from them (:mod:`ficc.domain.openai_answers`), and closing either closes the
engine's response at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

import httpx

from ficc.adapters.engines.errors import status_error, transport_error
from ficc.adapters.engines.sse import (
    EMPTY_STREAM,
    MAX_ASSEMBLED_BYTES,
    MAX_ASSEMBLED_EVENTS,
    EngineStream,
)
from ficc.adapters.engines.usage import PROBE_DEADLINE_SECONDS, UsageProbe, plain_probe
from ficc.base.errors import EngineUnavailable, FiccError, InvalidInput, LimitExceeded
from ficc.base.json_text import GRADUAL_JSON_BYTES, decode_gradually
from ficc.domain.openai_answers import (
    assemble_chat_completion,
    assemble_text_completion,
    chunk_text_bytes,
)
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    INFERENCE_PATHS,
    usage_requested,
)
from ficc.domain.openai_responses import RESPONSES_PATH

CHAT_COMPLETIONS: Final = CHAT_COMPLETIONS_PATH
COMPLETIONS: Final = COMPLETIONS_PATH
EMBEDDINGS: Final = EMBEDDINGS_PATH
MODELS: Final = "/v1/models"
ALLOWED_PATHS: Final = INFERENCE_PATHS | {RESPONSES_PATH}
"""The only paths a caller can reach on an engine; everything else the engine serves is private.
``/v1/responses`` is sent only to a runtime that serves it (vLLM); others get chat requests."""

DEFAULT_TIMEOUT: Final = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=5.0)
"""``read`` bounds the silence between two events: a long prompt on a CPU takes minutes."""
KEEPALIVE_CONNECTIONS: Final = 16
"""Idle connections kept per engine client for the next requests."""
KEEPALIVE_SECONDS: Final = 2.0
"""An idle connection is closed after this: under the 5 s after which uvicorn and llama.cpp's
server close one, so a kept connection is never one the engine is closing."""
MAX_ERROR_BODY_BYTES: Final = 16 * 1024
MAX_MODELS_BODY_BYTES: Final = 1024 * 1024
"""A model list is a few hundred bytes; a megabyte is a hostile or broken server."""
MODELS_DEADLINE_SECONDS: Final = 10.0
"""The whole ``/v1/models`` answer, however slowly it drips, arrives within this."""


def _check_path(path: str) -> None:
    if path not in ALLOWED_PATHS:
        allowed = ", ".join(sorted(ALLOWED_PATHS))
        raise InvalidInput(f"the engine path {path!r} is not allowed (allowed: {allowed})")


@dataclass(eq=False)
class _Connections:
    """One client and its pool of connections, with the exchanges open on it now."""

    client: httpx.AsyncClient
    transport: httpx.AsyncHTTPTransport
    users: int = 0


class EngineClient:
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
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        self._model = model
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout
        # identity: bodies are read raw and counted as they arrive, so none may be compressed.
        self._headers = {"Accept-Encoding": "identity"}
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._urls = {path: httpx.URL(self._base_url + path) for path in ALLOWED_PATHS}
        """Each completion path's URL, parsed once."""
        self._timeouts = {"timeout": timeout.as_dict()}
        self._client = self._new_client()
        self._retired: set[_Connections] = set()
        """Replaced clients with exchanges still open: each is closed when its last one ends."""
        self._usage = UsageProbe(self._post_json, model)
        """Counts usage where the engine streams none (see :class:`UsageProbe`)."""

    def _new_client(self) -> _Connections:
        # trust_env=False: an engine is reached directly, never through a proxy from the env.
        # Connections are kept (a new one costs more CPU than the whole relay of a short
        # answer) only as long as every answer on them ends cleanly: see _release.
        transport = httpx.AsyncHTTPTransport(
            trust_env=False,
            limits=httpx.Limits(
                max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_SECONDS,
            ),
        )
        client = httpx.AsyncClient(
            base_url=self._base_url,
            headers=self._headers,
            timeout=self._timeout,
            trust_env=False,
            transport=transport,
        )
        return _Connections(client, transport)

    def _hold(self) -> _Connections:
        connections = self._client
        connections.users += 1
        return connections

    async def _release(self, connections: _Connections, suspect: bool) -> None:
        """One exchange on ``connections`` ended; ``suspect``: it failed after the engine finished
        (or may have finished) its answer.

        An answer cut off closes its connection by itself. A failed one that the engine did
        finish would leave its connection in the pool, and llama.cpp's server can leave a
        connection dead after a failed stream: the client is replaced at once, and closed
        when its other exchanges end, so no later request is sent on that connection.
        """
        connections.users -= 1
        if suspect and connections is self._client:
            self._retired.add(connections)
            self._client = self._new_client()
        if connections.users == 0 and connections in self._retired:
            self._retired.discard(connections)
            await connections.client.aclose()

    @contextlib.asynccontextmanager
    async def _exchange(
        self, method: str, path: str, json_body: Mapping[str, Any] | None = None
    ) -> AsyncIterator[httpx.Response]:
        """One request whose answer is read within the block; one that failed once answered
        is taken as suspect (see :meth:`_release`): these exchanges are rare."""
        connections = self._hold()
        answered = False
        failed = True
        try:
            async with connections.client.stream(method, path, json=json_body) as response:
                answered = True
                yield response
                failed = response.status_code != httpx.codes.OK
        finally:
            await self._release(connections, answered and failed)

    async def aclose(self) -> None:
        """Close every connection to the engine."""
        retired, self._retired = self._retired, set()
        for connections in (self._client, *retired):
            await connections.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def list_models(self) -> dict[str, Any]:
        """``GET /v1/models``: the engine's health check as much as a listing.

        Read as a stream, at most :data:`MAX_MODELS_BODY_BYTES` within
        :data:`MODELS_DEADLINE_SECONDS`: the URL may be an upstream FICC does not control.
        """
        try:
            async with (
                asyncio.timeout(MODELS_DEADLINE_SECONDS),
                self._exchange("GET", MODELS) as response,
            ):
                if response.status_code != httpx.codes.OK:
                    error = await _read_bounded(response)
                    raise status_error(response.status_code, error)
                body = await _read_bounded(response, MAX_MODELS_BODY_BYTES + 1)
        except httpx.HTTPError as exc:
            raise transport_error(exc) from exc
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
        connections = self._hold()

        async def release(suspect: bool) -> None:
            await self._release(connections, suspect)

        try:
            response = await self._send(connections, path, request_body)
        except httpx.HTTPError as exc:
            await release(False)
            raise transport_error(exc) from exc
        except BaseException:
            await release(False)
            raise
        if response.status_code != httpx.codes.OK:
            try:
                content = await _read_bounded(response)
            finally:
                await response.aclose()
                await release(True)
            raise status_error(response.status_code, content)
        counter = self._usage.counter(path, body) if usage_requested(body) else None
        why_empty = functools.partial(self._why_empty, path, body)
        stream = EngineStream(
            response, path, counter, on_close, release=release, why_empty=why_empty
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
                self._exchange("POST", path, plain_probe(body, self._model)) as response,
            ):
                if response.status_code != httpx.codes.OK:
                    return status_error(response.status_code, await _read_bounded(response))
        except (httpx.HTTPError, TimeoutError):
            pass
        return EngineUnavailable(EMPTY_STREAM)

    async def _send(
        self, connections: _Connections, path: str, body: Mapping[str, Any]
    ) -> httpx.Response:
        """POST ``body`` through the client's transport itself, the answer unread.

        The client's own ``send`` adds redirects, auth, cookie extraction and a log line to
        every request (≈ a fifth of the grantor's CPU for a short streamed chat); an engine
        request needs none of them.
        """
        request = httpx.Request(
            "POST",
            self._urls[path],
            headers=connections.client.headers,
            json=body,
            extensions=self._timeouts,
        )
        response = await connections.transport.handle_async_request(request)
        response.request = request
        return response

    async def complete(
        self, path: str, body: Mapping[str, Any], *, max_bytes: int | None = None
    ) -> dict[str, Any]:
        """A plain response object, assembled from a streamed one so that a cancel stops it.

        The engine is asked for usage in its stream (OpenAI and vLLM send it); where it sends
        none, the engine counts it (see :meth:`_counted_usage`). ``max_bytes``: the answer's
        text is counted while it arrives; once the text alone passes it, the whole answer
        would too, and the engine is stopped at once.
        """
        if path == EMBEDDINGS:
            return await self._embeddings(body, max_bytes)
        if path == RESPONSES_PATH:
            return await self._response(body, max_bytes)
        request_body = dict(body)
        request_body["stream_options"] = {"include_usage": True}
        chunks: list[dict[str, Any]] = []
        size = 0
        text_bytes = 0
        async with await self.open_stream(path, request_body) as stream:
            async for event in stream:
                if event.done:
                    continue
                size += len(event.data)
                if len(chunks) >= MAX_ASSEMBLED_EVENTS or size > MAX_ASSEMBLED_BYTES:
                    raise EngineUnavailable(
                        f"the engine's answer passed {MAX_ASSEMBLED_EVENTS} events or "
                        f"{MAX_ASSEMBLED_BYTES} bytes; ask for a stream or fewer tokens"
                    )
                payload = event.payload()
                text_bytes += chunk_text_bytes(payload)
                if max_bytes is not None and text_bytes > max_bytes:
                    raise LimitExceeded(
                        f"the response would pass the grant's {max_bytes} response bytes",
                        details={"limit": "response_bytes", "allowed": max_bytes},
                    )
                chunks.append(payload)
        if path == CHAT_COMPLETIONS:
            return assemble_chat_completion(chunks)
        return assemble_text_completion(chunks)

    async def _response(self, body: Mapping[str, Any], max_bytes: int | None) -> dict[str, Any]:
        """A plain ``response`` from an engine with the Responses API: streamed (so a cancel
        stops it), the finished response taken from its last event, which carries it whole.
        ``max_bytes`` bounds the events' text as it arrives."""
        size = 0
        async with await self.open_stream(RESPONSES_PATH, body) as stream:
            async for event in stream:
                size += len(event.data)
                if size > MAX_ASSEMBLED_BYTES or (max_bytes is not None and size > 2 * max_bytes):
                    # Each text arrives twice (its deltas, then the response): half the events'
                    # bytes is a lower bound of the answer's.
                    if max_bytes is not None and size <= MAX_ASSEMBLED_BYTES:
                        raise LimitExceeded(
                            f"the response would pass the grant's {max_bytes} response bytes",
                            details={"limit": "response_bytes", "allowed": max_bytes},
                        )
                    raise EngineUnavailable(
                        f"the engine's answer passed {MAX_ASSEMBLED_BYTES} bytes; ask for a "
                        "stream or fewer tokens"
                    )
                if event.done:
                    response = event.payload().get("response")
                    if not isinstance(response, dict):
                        raise EngineUnavailable("the engine's last event carries no response")
                    return response
        raise EngineUnavailable("the engine ended the stream before it was complete")

    async def _embeddings(
        self, body: Mapping[str, Any], max_bytes: int | None = None
    ) -> dict[str, Any]:
        """``POST /v1/embeddings``, answered whole (nothing to cancel mid-way), read within
        :data:`MAX_ASSEMBLED_BYTES` and within ``max_bytes`` (a grant's ``response_bytes``:
        the engine's answer counts as it arrives, before any vector is averaged). One over
        a few MiB is decoded in a worker thread, gradually, so the loop goes on."""
        request_body = dict(body)
        if self._model is not None:
            request_body["model"] = self._model
        limit = MAX_ASSEMBLED_BYTES if max_bytes is None else min(max_bytes, MAX_ASSEMBLED_BYTES)
        try:
            async with self._exchange("POST", EMBEDDINGS, request_body) as response:
                if response.status_code != httpx.codes.OK:
                    raise status_error(response.status_code, await _read_bounded(response))
                content = await _read_bounded(response, limit + 1)
        except httpx.HTTPError as exc:
            raise transport_error(exc) from exc
        if len(content) > limit and limit != MAX_ASSEMBLED_BYTES:
            raise LimitExceeded(
                f"the engine's embeddings passed the grant's {limit} response bytes",
                details={"limit": "response_bytes", "allowed": limit},
            )
        if len(content) > MAX_ASSEMBLED_BYTES:
            raise EngineUnavailable(f"the engine's embeddings passed {MAX_ASSEMBLED_BYTES} bytes")
        try:
            if len(content) > GRADUAL_JSON_BYTES:
                value = await asyncio.to_thread(decode_gradually, content)
            else:
                value = json.loads(content)
        except ValueError as exc:
            raise EngineUnavailable("the engine's embeddings are not JSON") from exc
        if not isinstance(value, dict) or not isinstance(value.get("data"), list):
            raise EngineUnavailable("the engine's embeddings are not a list object")
        return value

    async def count_tokens(self, text: str) -> int | None:
        """The tokens of ``text`` by the engine's own tokenizer (llama.cpp's server counts
        them without generating anything), within :data:`PROBE_DEADLINE_SECONDS`; None where
        the engine cannot say."""
        try:
            async with asyncio.timeout(PROBE_DEADLINE_SECONDS):
                return await self._usage.tokenizer_count(text)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, TimeoutError):
            return None

    async def _post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """A small JSON answer, read within :data:`MAX_MODELS_BODY_BYTES` (ValueError past it)."""
        async with self._exchange("POST", path, body) as response:
            response.raise_for_status()
            content = await _read_bounded(response, MAX_MODELS_BODY_BYTES + 1)
        if len(content) > MAX_MODELS_BODY_BYTES:
            raise ValueError("the engine's answer is too large")
        return json.loads(content)


async def _read_bounded(response: httpx.Response, limit: int = MAX_ERROR_BODY_BYTES) -> bytes:
    """At most ``limit`` bytes of a body, read raw; the rest is never received."""
    content = bytearray()
    async for piece in response.aiter_raw():
        content += piece
        if len(content) >= limit:
            break
    return bytes(content[:limit])
