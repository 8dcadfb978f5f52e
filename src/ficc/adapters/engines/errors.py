"""Engine failures as FICC errors, with messages safe to show a remote peer."""

from __future__ import annotations

import json
import re
from typing import Final

import httpx

from ficc.base.errors import EngineUnavailable, FiccError, InvalidInput

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


def status_error(status: int, body: bytes) -> FiccError:
    text = engine_error_text(body)
    details = {"engine_status": status}
    validation = _validation_message(text)
    if validation is not None:
        return InvalidInput(validation, details=details)
    message = safe_engine_message(text)
    if 400 <= status < 500:
        return InvalidInput(f"the engine refused the request: {message}", details=details)
    return EngineUnavailable(f"the engine failed: {message}", details=details)


def transport_error(exc: httpx.HTTPError) -> FiccError:
    if isinstance(exc, httpx.TimeoutException):
        return EngineUnavailable("the engine did not answer in time")
    if isinstance(exc, httpx.ConnectError):
        return EngineUnavailable("the engine cannot be reached")
    return EngineUnavailable("the connection to the engine broke")
