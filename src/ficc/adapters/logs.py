"""Log records for operators: one format chosen at start, each record tagged with its request.

``ficc serve --log-format json`` writes one JSON object a line on stderr (``time``, ``level``,
``logger``, ``message``, ``request_id`` and any ``extra`` fields); ``text`` writes the same
facts as a readable line. The request ID lives in a context variable: the HTTP middleware
sets it for a request, the HyperNet adapter for a request a peer sent, and every record logged
while that work runs carries it.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from ficc.base.defaults import LOG_FORMATS, LOG_LEVELS
from ficc.base.request_ids import current_request_id as current_request_id
from ficc.protocol.messages import REQUEST_ID_PATTERN

CHATTY_LIBRARIES: Final = ("httpx", "httpcore")


# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "request_id", "taskName", "color_message"}
)


def new_request_id() -> str:
    return secrets.token_hex(16)


def well_formed_request_id(value: str | None) -> bool:
    """An incoming ID is kept only if a peer would accept it on the wire too."""
    return value is not None and REQUEST_ID_PATTERN.fullmatch(value) is not None


class RequestIdFilter(logging.Filter):
    """Puts the current request ID (or ``None``) on every record as ``request_id``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id.get()
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    """What the caller passed in ``extra``: not the record's own attributes, nor the private
    ones a library's record factory adds (Ray stamps ``_ray_timestamp_ns`` on every record)."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD_ATTRIBUTES and not key.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object a line; values JSON cannot hold are written as their text."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        document.update(_extras(record))
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER [REQUEST_ID] MESSAGE key=value…`` on one line (plus a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        parts = [_timestamp(record), record.levelname, record.name]
        if request_id:
            parts.append(f"[{request_id}]")
        parts.append(record.getMessage())
        parts.extend(f"{key}={value}" for key, value in _extras(record).items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(log_format: str, level: str, stream: TextIO | None = None) -> None:
    """Send every logger's records, from ``level`` up, to stderr in ``log_format``."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
    # httpx logs every request FICC makes to its engines at info: only at debug are they wanted.
    chatty = logging.DEBUG if level.lower() == "debug" else logging.WARNING
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(chatty)
