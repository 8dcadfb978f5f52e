"""A client for one OpenAI-compatible engine that always asks it to stream.

llama.cpp's server does not cancel a plain (non-streaming) request when its client goes away; a
streamed one stops within a second of the connection closing. So every request is sent with
``"stream": true``: streaming callers get the events as they arrive, plain callers get the JSON
object assembled here, and closing either closes the engine's response at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

import httpx

from ficc.base.errors import FiccError, InvalidInput, LimitExceeded, Unavailable

CHAT_COMPLETIONS: Final = "/v1/chat/completions"
COMPLETIONS: Final = "/v1/completions"
MODELS: Final = "/v1/models"
ALLOWED_PATHS: Final = frozenset({CHAT_COMPLETIONS, COMPLETIONS})
"""The only paths a caller can reach on an engine; everything else the engine serves is private."""

DEFAULT_TIMEOUT: Final = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=5.0)
"""``read`` bounds the silence between two events: a long prompt on a CPU takes minutes."""

MAX_ERROR_BODY_BYTES: Final = 16 * 1024
MAX_SAFE_MESSAGE_CHARS: Final = 200
SSE_EVENT_FRAMING_BYTES: Final = len(b"data: ") + len(b"\n\n")
"""What a streamed event adds to its data on the wire."""


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


class EngineStream:
    """An open streamed response: iterate it for events; closing it stops the generation."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    async def aclose(self) -> None:
        """Close the engine's response now; the engine stops generating within a second."""
        await self._response.aclose()

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

    async def _events(self) -> AsyncIterator[SseEvent]:
        """Each event as soon as its closing blank line arrives; ends after ``[DONE]``.

        An ``error`` event or an error object from the engine raises Unavailable with a safe
        message; so does a stream that ends without ``[DONE]``.
        """
        data: list[str] = []
        event: str | None = None
        received = False
        try:
            async for line in self._response.aiter_lines():
                if line:
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "data":
                        data.append(value)
                    elif name == "event":
                        event = value
                    continue
                if not data:
                    event = None
                    continue
                item = SseEvent("\n".join(data), event)
                data, event = [], None
                if item.done:
                    yield item
                    return
                _raise_for_error_event(item)
                received = True
                yield item
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        finally:
            await self._response.aclose()
        if not received:
            # llama.cpp's server reports errors found after the stream began (a prompt longer
            # than the context) only by ending the stream.
            raise Unavailable(
                "the engine ended the stream without an answer; the prompt may be longer than "
                "the model's context"
            )
        raise Unavailable("the engine ended the stream before it was complete")


def _raise_for_error_event(item: SseEvent) -> None:
    if item.event == "error":
        raise Unavailable(f"the engine failed: {safe_engine_message(item.data)}")
    if item.data.startswith("{") and '"error"' in item.data:
        payload = item.payload()
        if "error" in payload and "choices" not in payload:
            text = _engine_error_text(item.data.encode())
            raise Unavailable(f"the engine failed: {safe_engine_message(text)}")


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
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._model = model
        # trust_env=False: an engine is reached directly, never through a proxy from the env.
        # No keep-alive: llama.cpp's server can leave a connection dead after a failed stream,
        # and a fresh loopback connection costs far less than one token.
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            transport=transport,
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def aclose(self) -> None:
        """Close every connection to the engine."""
        await self._client.aclose()

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
        """``GET /v1/models``: the engine's health check as much as a listing."""
        try:
            response = await self._client.get(MODELS)
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        if response.status_code != httpx.codes.OK:
            raise _status_error(response.status_code, response.content[:MAX_ERROR_BODY_BYTES])
        try:
            value = response.json()
        except ValueError as exc:
            raise Unavailable("the engine's model list is not JSON") from exc
        if not isinstance(value, dict):
            raise Unavailable("the engine's model list is not a JSON object")
        return value

    async def open_stream(self, path: str, body: Mapping[str, Any]) -> EngineStream:
        """Send ``body`` to ``path`` as a streaming request; errors arrive before any event.

        The caller must close the result (``async with``) — closing is what cancels.
        """
        _check_path(path)
        request_body = dict(body)
        request_body["stream"] = True
        if self._model is not None:
            request_body["model"] = self._model
        request = self._client.build_request("POST", path, json=request_body)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _transport_error(exc) from exc
        if response.status_code != httpx.codes.OK:
            try:
                content = await _read_bounded(response)
            finally:
                await response.aclose()
            raise _status_error(response.status_code, content)
        return EngineStream(response)

    async def complete(
        self, path: str, body: Mapping[str, Any], *, max_bytes: int | None = None
    ) -> dict[str, Any]:
        """A plain response object, assembled from a streamed one so that a cancel stops it.

        ``max_bytes``: the answer is counted while it arrives, as its stream would be sent
        (``data: …`` and a blank line per event); passing it stops the engine at once.
        """
        request_body = {k: v for k, v in body.items() if k != "stream_options"}
        chunks: list[dict[str, Any]] = []
        received = 0
        async with await self.open_stream(path, request_body) as stream:
            async for event in stream:
                if event.done:
                    continue
                received += len(event.data.encode()) + SSE_EVENT_FRAMING_BYTES
                if max_bytes is not None and received > max_bytes:
                    raise LimitExceeded(
                        f"the response would pass the grant's {max_bytes} response bytes",
                        details={"limit": "response_bytes", "allowed": max_bytes},
                    )
                chunks.append(event.payload())
        if path == CHAT_COMPLETIONS:
            return assemble_chat_completion(chunks)
        return assemble_text_completion(chunks)


async def _read_bounded(response: httpx.Response) -> bytes:
    content = bytearray()
    async for piece in response.aiter_bytes():
        content += piece
        if len(content) >= MAX_ERROR_BODY_BYTES:
            break
    return bytes(content[:MAX_ERROR_BODY_BYTES])


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
        function = delta.get("function") or {}
        target = call["function"]
        if function.get("name"):
            target["name"] = target.get("name", "") + function["name"]
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
                index, {"role": None, "content": [], "finish_reason": None, "logprobs": None}
            )
            delta = choice.get("delta") or {}
            if delta.get("role"):
                slot["role"] = delta["role"]
            if delta.get("content"):
                slot["content"].append(delta["content"])
            if delta.get("tool_calls"):
                _merge_tool_calls(tool_calls.setdefault(index, {}), delta["tool_calls"])
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
