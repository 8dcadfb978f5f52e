"""Default addresses, here so that the CLI can show them in its help without importing the
composition root (which loads the database, HyperNet and runtime libraries)."""

from __future__ import annotations

from typing import Final

DEFAULT_LISTEN: Final = "127.0.0.1:8470"
DEFAULT_HYPERNET_BIND: Final = "0.0.0.0:0"
