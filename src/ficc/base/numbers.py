"""Checking a whole number a caller gives (a weight, a count, an engine option)."""

from __future__ import annotations

from ficc.base.errors import InvalidInput


def parse_integer_between(value: object, field: str, low: int, high: int) -> int:
    """``value``, if it is an integer (not a boolean) from ``low`` to ``high``; else refused
    naming ``field`` and both bounds."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(
            f"{field} must be an integer from {low} to {high}",
            field=field,
            details={"minimum": low, "maximum": high},
        )
    return value
