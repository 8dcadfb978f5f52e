"""Decoding large JSON text without holding the interpreter for the whole of it.

The standard library's C decoder turns a whole document into objects in one call: run in a
worker thread it still holds the interpreter (and so the event loop) until it is done. Its
Python scanner builds the same objects a value at a time (strings still by the C scanner),
so the interpreter passes to other threads every few milliseconds. Several times slower; for
bodies over a few MiB only, in a worker thread.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable
from typing import Any, Final

GRADUAL_JSON_BYTES: Final = 4 * 1024 * 1024
"""Above this, JSON is decoded (or encoded) gradually in a worker thread."""


class _GradualDecoder(json.JSONDecoder):
    def __init__(self, parse_constant: Callable[[str], Any] | None = None) -> None:
        super().__init__(parse_constant=parse_constant)
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]


def decode_gradually(raw: bytes, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``raw`` (UTF-8 JSON) decoded by the Python scanner; ValueError as :func:`json.loads`."""
    return _GradualDecoder(parse_constant).decode(raw.decode("utf-8"))


_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))


def compact_size_gradually(value: Any) -> int:
    """``len(json.dumps(value, separators=(",", ":")).encode())``, encoded value by value."""
    return sum(len(piece) for piece in _COMPACT.iterencode(value))
