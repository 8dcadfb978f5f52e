"""A client for one OpenAI-compatible engine that always asks it to stream.

llama.cpp's server does not cancel a plain (non-streaming) request when its client goes away; a
streamed one stops within a second of the connection closing. So every request is sent with
``"stream": true``: streaming callers get the events as they arrive, plain callers get the JSON
object assembled here, and closing either closes the engine's response at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

import httpx

from ficc.base.errors import FiccError, InvalidInput, LimitExceeded, Unavailable
from ficc.base.json_text import GRADUAL_JSON_BYTES, decode_gradually
from ficc.domain.openai_requests import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    INFERENCE_PATHS,
    usage_requested,
)

CHAT_COMPLETIONS: Final = CHAT_COMPLETIONS_PATH
COMPLETIONS: Final = COMPLETIONS_PATH
EMBEDDINGS: Final = EMBEDDINGS_PATH
MODELS: Final = "/v1/models"
ALLOWED_PATHS: Final = INFERENCE_PATHS
"""The only paths a caller can reach on an engine; everything else the engine serves is private."""

DEFAULT_TIMEOUT: Final = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=5.0)
"""``read`` bounds the silence between two events: a long prompt on a CPU takes minutes."""
KEEPALIVE_CONNECTIONS: Final = 16
"""Idle connections kept per engine client for the next requests."""
KEEPALIVE_SECONDS: Final = 2.0
"""An idle connection is closed after this: under the 5 s after which uvicorn and llama.cpp's
server close one, so a kept connection is never one the engine is closing."""
END_DRAIN_SECONDS: Final = 1.0
"""After ``[DONE]``, how long the end of the body may take; later, the connection is closed."""

LLAMA_CPP_COUNT_PATH: Final = "/extras/tokenize/count"
"""llama.cpp's server counts the tokens of a text with the model's own tokenizer here."""
USAGE_PROBE_MAX_TOKENS: Final = 1
"""The prompt of a plain probe is the prompt just generated from: the engine's cache answers it."""
PROBE_DROPPED_FIELDS: Final = frozenset(
    {"stream", "stream_options", "logprobs", "top_logprobs", "n", "max_completion_tokens"}
)
MAX_ERROR_BODY_BYTES: Final = 16 * 1024
MAX_SAFE_MESSAGE_CHARS: Final = 200
MAX_MODELS_BODY_BYTES: Final = 1024 * 1024
"""A model list is a few hundred bytes; a megabyte is a hostile or broken server."""
MODELS_DEADLINE_SECONDS: Final = 10.0
"""The whole ``/v1/models`` answer, however slowly it drips, arrives within this."""
MAX_LINE_BYTES: Final = 1024 * 1024
MAX_EVENT_BYTES: Final = 1024 * 1024
"""One event's data: a streamed chunk is a few hundred bytes, and a peer receives an event in
one frame of at most 1 MiB anyway."""
MAX_ASSEMBLED_EVENTS: Final = 65_536
MAX_ASSEMBLED_BYTES: Final = 64 * 1024 * 1024
"""What a plain answer may be assembled from (the grant's default ``response_bytes``)."""


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event as the engine sent it; ``data`` is its joined data lines."""

    data: str
    event: str | None = None

    @property
    def done(self) -> bool:
        """The OpenAI stream's end marker."""
        return self.data == "[DONE]"

    def payload(self) -> dict[str, Any]:
        """The event's JSON object; Unavailable if the engine sent something else."""
        try:
            value = json.loads(self.data)
        except ValueError as exc:
            raise Unavailable("the engine sent an event that is not JSON") from exc
        if not isinstance(value, dict):
            raise Unavailable("the engine sent an event that is not a JSON object")
        return value


_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.+@-]+){2,}[\\/]?|[\w.-]+\.(?:py|so|cpp|c|h)\b")
_ADDRESS = re.compile(r"\b0x[0-9A-Fa-f]{4,}\b")
_INTERNALS = re.compile(r"traceback|exception|error in|line \d+|<[\w.]+ object", re.IGNORECASE)


def safe_engine_message(text: str) -> str:
    """Reduce engine error text to one short sentence with no file paths or internals.

    The engine's messages are shown to remote peers; llama.cpp's server puts its own paths and
    Python tracebacks in them.
    """
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = _PATH.sub("<path>", first)
    first = _ADDRESS.sub("<address>", first)
    first = "".join(ch for ch in first if ch.isascii() and ch.isprintable())
    first = " ".join(first.split())
    if not first or _INTERNALS.search(first):
        return "the engine could not process the request"
    if len(first) > MAX_SAFE_MESSAGE_CHARS:
        first = first[: MAX_SAFE_MESSAGE_CHARS - 1].rstrip() + "…"
    return first


def _engine_error_text(body: bytes) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        detail = value.get("detail")
        if isinstance(detail, str):
            return detail
    return ""


_VALIDATION = re.compile(r"^\d+ validation errors?:")
_VALIDATION_ITEM = re.compile(r"'loc': \(([^)]*)\), 'msg': '([^']{1,120})'")


def _validation_message(text: str) -> str | None:
    """llama.cpp's server answers a malformed request with HTTP 500 and pydantic's text."""
    if not _VALIDATION.match(text.strip()):
        return None
    item = _VALIDATION_ITEM.search(text)
    if item is None:
        return "the engine refused the request as malformed"
    location = [
        part.strip(" '\"")
        for part in item.group(1).split(",")
        if part.strip(" '\"") not in {"", "body"}
    ]
    where = ".".join(location) or "body"
    return f"the engine refused the request: {safe_engine_message(where + ': ' + item.group(2))}"


def _status_error(status: int, body: bytes) -> FiccError:
    text = _engine_error_text(body)
    details = {"engine_status": status}
    validation = _validation_message(text)
    if validation is not None:
        return InvalidInput(validation, details=details)
    message = safe_engine_message(text)
    if 400 <= status < 500:
        return InvalidInput(f"the engine refused the request: {message}", details=details)
    return Unavailable(f"the engine failed: {message}", details=details)


def _transport_error(exc: httpx.HTTPError) -> FiccError:
    if isinstance(exc, httpx.TimeoutException):
        return Unavailable("the engine did not answer in time")
    if isinstance(exc, httpx.ConnectError):
        return Unavailable("the engine cannot be reached")
    return Unavailable("the connection to the engine broke")


def _check_path(path: str) -> None:
    if path not in ALLOWED_PATHS:
        allowed = ", ".join(sorted(ALLOWED_PATHS))
        raise InvalidInput(f"the engine path {path!r} is not allowed (allowed: {allowed})")


UsageCounter = Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any] | None]]
"""Counts the usage of a finished stream from its chunks, for engines that stream none."""


class EngineStream:
    """An open streamed response: iterate it for events; closing it stops the generation.

    With ``count_usage``, a stream whose engine sent no usage gets a final usage chunk before
    ``[DONE]``, counted by the engine itself, as OpenAI sends one for ``include_usage``.
    """

    def __init__(
        self,
        response: httpx.Response,
        path: str,
        count_usage: UsageCounter | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        *,
        release: Callable[[bool], Awaitable[None]] | None = None,
    ) -> None:
        self._response = response
        self._path = path
        self._count_usage = count_usage
        self._on_close = on_close
        self._release = release
        self._clean = False
        """``[DONE]`` arrived and the body ended right after it: the connection can be reused."""
        self._ended = False
        """The engine finished the body (HTTP's end, whatever it held)."""

    async def aclose(self) -> None:
        """Close the engine's response now; the engine stops generating within a second."""
        try:
            await self._finish()
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                await on_close()

    async def _finish(self) -> None:
        """Close the response (an unfinished one closes its connection) and tell the client
        whether the connection may be dead though finished (see :meth:`EngineClient._release`)."""
        try:
            await self._response.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                await release(self._ended and not self._clean)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[SseEvent]:
        return self._events()

    async def _lines(self) -> AsyncIterator[str]:
        """The stream's lines, each at most :data:`MAX_LINE_BYTES`; raw bytes, never decoded
        by content encoding (the request asks for ``identity``), so nothing inflates."""
        buffer = bytearray()
        async for piece in self._response.aiter_raw():
            buffer += piece
            start = 0
            while (end := _LINE_END.search(buffer, start)) is not None:
                if end.group() == b"\r" and end.end() == len(buffer):
                    break  # the "\n" of a "\r\n" may come with the next piece
                yield buffer[start : end.start()].decode("utf-8", "replace")
                start = end.end()
            del buffer[:start]
            if len(buffer) > MAX_LINE_BYTES:
                raise Unavailable(f"the engine sent a line longer than {MAX_LINE_BYTES} bytes")
        self._ended = True
        if buffer:
            yield buffer.decode("utf-8", "replace")

    async def _events(self) -> AsyncIterator[SseEvent]:
        """Each event as soon as its closing blank line arrives; ends after ``[DONE]``.

        An ``error`` event or an error object from the engine raises Unavailable with a safe
        message; so does a stream that ends without ``[DONE]``, and an event or line over its
        bound (the connection is closed: a hostile upstream cannot fill FICC's memory).
        """
        data: list[str] = []
        size = 0
        event: str | None = None
        received = False
        chunks: list[dict[str, Any]] = []
        lines = self._lines()
        try:
            async for line in lines:
                if line:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "data":
                        data.append(value)
                        size += len(value) + 1
                        if size > MAX_EVENT_BYTES:
                            raise Unavailable(
                                f"the engine sent an event larger than {MAX_EVENT_BYTES} bytes"
                            )
                    elif name == "event":
                        event = value
                    continue
                if not data:
                    event = None
                    continue
                item = SseEvent("\n".join(data), event)
                data, size, event = [], 0, None
                if item.done:
                    if self._count_usage is not None and not _has_usage(chunks):
                        usage_chunk = await self._usage_chunk(chunks)
                        if usage_chunk is not None:
                            yield usage_chunk
                    yield item
                    self._clean = await _ends_after_done(lines)
                    return
                _raise_for_error_event(item)
                received = True
                if self._count_usage is not None and len(chunks) < MAX_ASSEMBLED_EVENTS:
                    chunks.append(item.payload())
                yield item
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        finally:
            await self._finish()
        if not received:
            # llama.cpp's server reports errors found after the stream began (a prompt longer
            # than the context) only by ending the stream.
            raise Unavailable(
                "the engine ended the stream without an answer; the prompt may be longer than "
                "the model's context"
            )
        raise Unavailable("the engine ended the stream before it was complete")

    async def _usage_chunk(self, chunks: list[dict[str, Any]]) -> SseEvent | None:
        """The usage chunk OpenAI ends a stream with, or None when it cannot be counted."""
        if self._count_usage is None or not chunks:
            return None
        usage = await self._count_usage(chunks)
        if usage is None:
            return None
        first = chunks[0]
        kind = "chat.completion.chunk" if self._path == CHAT_COMPLETIONS else "text_completion"
        chunk: dict[str, Any] = {
            "id": first.get("id"),
            "object": kind,
            "created": first.get("created"),
            "model": first.get("model"),
            "choices": [],
            "usage": usage,
        }
        return SseEvent(json.dumps(chunk, separators=(",", ":")))


async def _ends_after_done(lines: AsyncIterator[str]) -> bool:
    """Whether the body ends, with nothing but blank lines, soon after ``[DONE]``.

    Only then is the connection left as HTTP expects it, ready for the next request.
    """
    try:
        async with asyncio.timeout(END_DRAIN_SECONDS):
            async for line in lines:
                if line:
                    return False
    except (TimeoutError, httpx.HTTPError, Unavailable):
        return False
    return True


def _has_usage(chunks: list[dict[str, Any]]) -> bool:
    return any(chunk.get("usage") for chunk in chunks)


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _raise_for_error_event(item: SseEvent) -> None:
    if item.event == "error":
        raise Unavailable(f"the engine failed: {safe_engine_message(item.data)}")
    if item.data.startswith("{") and '"error"' in item.data:
        payload = item.payload()
        if "error" in payload and "choices" not in payload:
            text = _engine_error_text(item.data.encode())
            raise Unavailable(f"the engine failed: {safe_engine_message(text)}")


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
        self._empty_text_tokens: int | None = None
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
                    raise _status_error(response.status_code, error)
                body = await _read_bounded(response, MAX_MODELS_BODY_BYTES + 1)
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        except TimeoutError as exc:
            raise Unavailable("the engine did not answer in time") from exc
        if len(body) > MAX_MODELS_BODY_BYTES:
            raise Unavailable(f"the engine's model list is over {MAX_MODELS_BODY_BYTES} bytes")
        try:
            value = json.loads(body)
        except ValueError as exc:
            raise Unavailable("the engine's model list is not JSON") from exc
        if not isinstance(value, dict):
            raise Unavailable("the engine's model list is not a JSON object")
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
            raise _transport_error(exc) from exc
        except BaseException:
            await release(False)
            raise
        if response.status_code != httpx.codes.OK:
            try:
                content = await _read_bounded(response)
            finally:
                await response.aclose()
                await release(True)
            raise _status_error(response.status_code, content)
        if not usage_requested(body):
            return EngineStream(response, path, on_close=on_close, release=release)

        async def count_usage(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
            return await self._counted_usage(path, body, chunks)

        return EngineStream(response, path, count_usage, on_close, release=release)

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
                    raise Unavailable(
                        f"the engine's answer passed {MAX_ASSEMBLED_EVENTS} events or "
                        f"{MAX_ASSEMBLED_BYTES} bytes; ask for a stream or fewer tokens"
                    )
                payload = event.payload()
                text_bytes += _text_bytes(payload)
                if max_bytes is not None and text_bytes > max_bytes:
                    raise LimitExceeded(
                        f"the response would pass the grant's {max_bytes} response bytes",
                        details={"limit": "response_bytes", "allowed": max_bytes},
                    )
                chunks.append(payload)
        if path == CHAT_COMPLETIONS:
            return assemble_chat_completion(chunks)
        return assemble_text_completion(chunks)

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
                    raise _status_error(response.status_code, await _read_bounded(response))
                content = await _read_bounded(response, limit + 1)
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        if len(content) > limit and limit != MAX_ASSEMBLED_BYTES:
            raise LimitExceeded(
                f"the engine's embeddings passed the grant's {limit} response bytes",
                details={"limit": "response_bytes", "allowed": limit},
            )
        if len(content) > MAX_ASSEMBLED_BYTES:
            raise Unavailable(f"the engine's embeddings passed {MAX_ASSEMBLED_BYTES} bytes")
        try:
            if len(content) > GRADUAL_JSON_BYTES:
                value = await asyncio.to_thread(decode_gradually, content)
            else:
                value = json.loads(content)
        except ValueError as exc:
            raise Unavailable("the engine's embeddings are not JSON") from exc
        if not isinstance(value, dict) or not isinstance(value.get("data"), list):
            raise Unavailable("the engine's embeddings are not a list object")
        return value

    async def _counted_usage(
        self, path: str, body: Mapping[str, Any], chunks: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Usage as the engine reports it for the same request made plainly; None if unknown.

        llama.cpp's server streams no usage. Its prompt count comes from a plain probe of the
        same request limited to one token (the prompt is in the engine's cache by now); its
        completion count is ``max_tokens`` for an answer cut by the limit, else the tokens of
        the answer's text by the engine's tokenizer. An engine without either answers None.
        """
        try:
            prompt_tokens = await self._prompt_tokens(path, body)
            completion_tokens = 0
            for text, finish_reason in _answer_texts(path, chunks):
                max_tokens = body.get("max_tokens")
                if finish_reason == "length" and isinstance(max_tokens, int):
                    completion_tokens += max_tokens
                else:
                    completion_tokens += await self._token_count(text)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    async def _prompt_tokens(self, path: str, body: Mapping[str, Any]) -> int:
        probe = {k: v for k, v in body.items() if k not in PROBE_DROPPED_FIELDS}
        probe.update(max_tokens=USAGE_PROBE_MAX_TOKENS, stream=False)
        if self._model is not None:
            probe["model"] = self._model
        return _count((await self._post_json(path, probe))["usage"]["prompt_tokens"])

    async def _token_count(self, text: str) -> int:
        """Tokens of ``text`` alone: the tokenizer's count less the BOS it may add."""
        if self._empty_text_tokens is None:
            self._empty_text_tokens = await self._tokenizer_count("")
        if not text:
            return 0
        return await self._tokenizer_count(text) - self._empty_text_tokens

    async def _tokenizer_count(self, text: str) -> int:
        return _count((await self._post_json(LLAMA_CPP_COUNT_PATH, {"input": text}))["count"])

    async def _post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """A small JSON answer, read within :data:`MAX_MODELS_BODY_BYTES` (ValueError past it)."""
        async with self._exchange("POST", path, body) as response:
            response.raise_for_status()
            content = await _read_bounded(response, MAX_MODELS_BODY_BYTES + 1)
        if len(content) > MAX_MODELS_BODY_BYTES:
            raise ValueError("the engine's answer is too large")
        return json.loads(content)


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("the engine's count is not a whole number")
    return value


def _answer_texts(path: str, chunks: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Each choice's generated text (tool calls included) and its finish reason."""
    if path != CHAT_COMPLETIONS:
        answer = assemble_text_completion(chunks)
        return [(str(c["text"]), c["finish_reason"]) for c in answer["choices"]]
    answer = assemble_chat_completion(chunks)
    texts = []
    for choice in answer["choices"]:
        message = choice["message"]
        calls = message.get("tool_calls") or []
        text = (message["content"] or "") + "".join(
            str(call.get("function", {}).get("arguments", "")) for call in calls
        )
        texts.append((text, choice["finish_reason"]))
    return texts


def _text_bytes(chunk: Mapping[str, Any]) -> int:
    """The bytes of text a streamed chunk adds to its answer: a lower bound of what it adds
    to the assembled JSON (which also carries the envelope and escapes)."""
    total = 0
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str):
            total += len(text.encode())
    return total


async def _read_bounded(response: httpx.Response, limit: int = MAX_ERROR_BODY_BYTES) -> bytes:
    """At most ``limit`` bytes of a body, read raw; the rest is never received."""
    content = bytearray()
    async for piece in response.aiter_raw():
        content += piece
        if len(content) >= limit:
            break
    return bytes(content[:limit])


def _merge_logprobs(old: Any, new: Any) -> Any:
    """Streamed logprobs are lists split across chunks: join them, keep other fields."""
    if new is None:
        return old
    if old is None:
        return new
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            if isinstance(merged.get(key), list) and isinstance(value, list):
                merged[key] = merged[key] + value
            elif value is not None:
                merged[key] = value
        return merged
    return new


def _header(chunks: list[dict[str, Any]], obj: str) -> dict[str, Any]:
    if not chunks:
        raise Unavailable("the engine sent no completion")
    first = chunks[0]
    result: dict[str, Any] = {
        "id": first.get("id"),
        "object": obj,
        "created": first.get("created"),
        "model": first.get("model"),
    }
    if first.get("system_fingerprint") is not None:
        result["system_fingerprint"] = first["system_fingerprint"]
    usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
    if usage is not None:
        result["usage"] = usage
    return result


def _choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    choices = chunk.get("choices") or []
    return [c for c in choices if isinstance(c, dict)]


def _merge_tool_calls(calls: dict[int, dict[str, Any]], deltas: list[Any]) -> None:
    for delta in deltas:
        if not isinstance(delta, dict):
            continue
        call = calls.setdefault(int(delta.get("index", len(calls))), {"function": {}})
        for key in ("id", "type"):
            if delta.get(key) is not None:
                call[key] = delta[key]
        _merge_function(call["function"], delta.get("function"))


def _merge_function(target: dict[str, Any], function: Any) -> None:
    """Arguments arrive in pieces; the name arrives once from OpenAI but in every delta from
    llama.cpp's server, so a name equal to the one held is not appended again."""
    if not isinstance(function, dict):
        return
    name = function.get("name")
    if name and name != target.get("name"):
        target["name"] = target.get("name", "") + name
    if function.get("arguments"):
        target["arguments"] = target.get("arguments", "") + function["arguments"]


def assemble_chat_completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Join ``chat.completion.chunk`` objects into one ``chat.completion``."""
    result = _header(chunks, "chat.completion")
    merged: dict[int, dict[str, Any]] = {}
    tool_calls: dict[int, dict[int, dict[str, Any]]] = {}
    for chunk in chunks:
        for choice in _choices(chunk):
            index = int(choice.get("index", 0))
            slot = merged.setdefault(
                index,
                {
                    "role": None,
                    "content": [],
                    "finish_reason": None,
                    "logprobs": None,
                    "function_call": None,
                },
            )
            delta = choice.get("delta") or {}
            if delta.get("role"):
                slot["role"] = delta["role"]
            if delta.get("content"):
                slot["content"].append(delta["content"])
            if delta.get("tool_calls"):
                _merge_tool_calls(tool_calls.setdefault(index, {}), delta["tool_calls"])
            if isinstance(delta.get("function_call"), dict):
                # The deprecated form, which llama.cpp's server sends beside tool_calls.
                slot["function_call"] = slot["function_call"] or {}
                _merge_function(slot["function_call"], delta["function_call"])
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
            slot["logprobs"] = _merge_logprobs(slot["logprobs"], choice.get("logprobs"))
    choices = []
    for index in sorted(merged):
        slot = merged[index]
        calls = [tool_calls[index][i] for i in sorted(tool_calls.get(index, {}))]
        message: dict[str, Any] = {
            "role": slot["role"] or "assistant",
            "content": "".join(slot["content"]) if slot["content"] or not calls else None,
        }
        if calls:
            message["tool_calls"] = calls
        if slot["function_call"] is not None:
            message["function_call"] = slot["function_call"]
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": slot["logprobs"],
                "finish_reason": slot["finish_reason"],
            }
        )
    result["choices"] = choices
    return result


def assemble_text_completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Join streamed ``text_completion`` objects into one."""
    result = _header(chunks, "text_completion")
    merged: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in _choices(chunk):
            index = int(choice.get("index", 0))
            slot = merged.setdefault(index, {"text": [], "finish_reason": None, "logprobs": None})
            if choice.get("text"):
                slot["text"].append(choice["text"])
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
            slot["logprobs"] = _merge_logprobs(slot["logprobs"], choice.get("logprobs"))
    result["choices"] = [
        {
            "index": index,
            "text": "".join(merged[index]["text"]),
            "logprobs": merged[index]["logprobs"],
            "finish_reason": merged[index]["finish_reason"],
        }
        for index in sorted(merged)
    ]
    return result
