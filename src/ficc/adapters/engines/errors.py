"""Engine failures as FICC errors, with messages safe to show a remote peer."""

from __future__ import annotations

import json
import re
from typing import Final

import aiohttp

from ficc.base.errors import (
    ContextLengthExceeded,
    EngineUnavailable,
    FiccError,
    InvalidInput,
    LimitExceeded,
    TooLarge,
)

MAX_SAFE_MESSAGE_CHARS: Final = 200


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


def engine_error_text(body: bytes) -> str:
    return engine_error_fields(body)[0]


def engine_error_fields(body: bytes) -> tuple[str, str | None, str | None]:
    """The engine's error message, and OpenAI's ``param`` and ``code`` where it sent them."""
    try:
        value = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace"), None, None
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            param, code = error.get("param"), error.get("code")
            return (
                str(error["message"]),
                param if isinstance(param, str) else None,
                code if isinstance(code, str) else None,
            )
        if isinstance(error, str):
            return error, None, None
        detail = value.get("detail")
        if isinstance(detail, str):
            return detail, None, None
        if isinstance(value.get("message"), str):
            # vLLM's older shape: the error's fields at the top level.
            param, code = value.get("param"), value.get("code")
            return (
                str(value["message"]),
                param if isinstance(param, str) else None,
                code if isinstance(code, str) else None,
            )
    return "", None, None


_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]]{0,99}$")
"""A parameter's path as OpenAI names it (``messages[0].role``); anything else is not shown."""
_CONTEXT = re.compile(r"maximum context length|exceeds? (?:the )?context", re.IGNORECASE)
"""How vLLM and OpenAI-compatible servers word a prompt longer than the context."""


_VALIDATION = re.compile(r"^\d+ validation errors?:")
_VALIDATION_ITEM = re.compile(r"'loc': \(([^)]*)\), 'msg': '([^']{1,120})'")


def _validation_message(text: str) -> tuple[str, str] | None:
    """llama.cpp's server answers a malformed request with HTTP 500 and pydantic's text: the
    refusal's sentence and the parameter it names."""
    if not _VALIDATION.match(text.strip()):
        return None
    item = _VALIDATION_ITEM.search(text)
    if item is None:
        return "the engine refused the request as malformed", "body"
    location = [
        part.strip(" '\"")
        for part in item.group(1).split(",")
        if part.strip(" '\"") not in {"", "body"}
    ]
    where = "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in location)
    where = where.removeprefix(".") or "body"
    message = safe_engine_message(where + ": " + item.group(2))
    return f"the engine refused the request: {message}", where


def status_error(status: int, body: bytes) -> FiccError:
    """The engine's refusal as the caller's error: its own 4xx a 4xx naming the parameter, a
    prompt past the context ``context_length_exceeded``, anything else the engine's failure."""
    text, param, code = engine_error_fields(body)
    details = {"engine_status": status}
    validation = _validation_message(text)
    if validation is not None:
        message, where = validation
        return InvalidInput(message, field=where, details=details)
    message = safe_engine_message(text)
    field = param if param is not None and _PARAM.match(param) else None
    if 400 <= status < 500 and (code == "context_length_exceeded" or _CONTEXT.search(text)):
        return ContextLengthExceeded(
            f"the prompt is longer than the model's context: {message}",
            field=field or "messages",
            details=details,
        )
    if status in (401, 403):
        # The engine refused FICC's own credential: nothing the caller can fix.
        return EngineUnavailable(
            f"the engine refused FICC's credential: {message}", details=details
        )
    if status == 429:
        return LimitExceeded(
            f"the engine is busy: {message}", details={**details, "limit": "engine"}
        )
    if status == 413:
        return TooLarge(f"the engine refused the request: {message}", field=field, details=details)
    if 400 <= status < 500:
        return InvalidInput(
            f"the engine refused the request: {message}", field=field, details=details
        )
    return EngineUnavailable(f"the engine failed: {message}", details=details)


def transport_error(exc: aiohttp.ClientError | TimeoutError) -> FiccError:
    """An HTTP failure reaching or reading the engine, as the caller's error (aiohttp's
    timeouts are TimeoutErrors too; a refused or unresolvable address a connector error)."""
    if isinstance(exc, TimeoutError):
        return EngineUnavailable("the engine did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return EngineUnavailable("the engine cannot be reached")
    return EngineUnavailable("the connection to the engine broke")
