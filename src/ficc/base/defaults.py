"""Default addresses and the log choices, here so that the CLI can show them in its help
without importing the composition root (which loads the database, HyperNet and runtime
libraries)."""

from __future__ import annotations

from typing import Final

DEFAULT_LISTEN: Final = "127.0.0.1:8470"
DEFAULT_HYPERNET_BIND: Final = "0.0.0.0:0"
LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")

DEFAULT_STREAM_JOIN_MS: Final = 5
"""A streamed answer's pieces go on at most once in 5 ms: a person reading sees no
difference (a screen redraws every 16 ms), an engine streaming slower than 200 tokens a
second is not joined at all, and a faster stream costs each hop a write a window, not a
token."""
MAX_STREAM_JOIN_MS: Final = 1000
