"""Units of size and time; a unit lives in a name (``*_bytes``, ``*_seconds``)."""

from collections.abc import Mapping
from typing import Final

from ficc.base.errors import InvalidInput

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB
TiB: Final = 1024 * GiB

MINUTE_SECONDS: Final = 60
HOUR_SECONDS: Final = 60 * MINUTE_SECONDS
DAY_SECONDS: Final = 24 * HOUR_SECONDS

MIN_SETTING_SECONDS: Final = 0.1
MAX_SETTING_SECONDS: Final = 3600.0


def seconds_setting(env: Mapping[str, str], variable: str, default: float) -> float:
    """A duration set by the environment variable ``variable``: unset or empty keeps
    ``default``; else a number of seconds from 0.1 to 3600, or InvalidInput naming it."""
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not MIN_SETTING_SECONDS <= seconds <= MAX_SETTING_SECONDS:
        raise InvalidInput(
            f"{variable} must be a number of seconds from 0.1 to 3600", field=variable
        )
    return seconds
