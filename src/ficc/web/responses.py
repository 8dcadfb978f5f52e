"""JSON responses with FICC's encodings: RFC 3339 UTC times, nothing else special."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fastapi.responses import JSONResponse

from ficc.base.times import format_time


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, frozenset | set):
        return sorted(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(content: Any) -> bytes:
    return json.dumps(content, default=_default, separators=(",", ":")).encode("utf-8")


class FiccJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content)
