"""Units of size and time; a unit lives in a name (``*_bytes``, ``*_seconds``)."""

from typing import Final

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB
TiB: Final = 1024 * GiB

MINUTE_SECONDS: Final = 60
HOUR_SECONDS: Final = 60 * MINUTE_SECONDS
DAY_SECONDS: Final = 24 * HOUR_SECONDS
