"""Checking the short free text a caller names things with (a model's name, a label)."""

from __future__ import annotations

from ficc.base.errors import InvalidInput


def parse_short_text(value: object, field: str, max_chars: int) -> str:
    """``value`` stripped, if it is a string with more than white space and at most
    ``max_chars`` characters; else refused naming ``field``."""
    if not isinstance(value, str) or not value.strip() or len(value) > max_chars:
        raise InvalidInput(
            f"{field} must be a non-empty string of at most {max_chars} characters",
            field=field,
        )
    return value.strip()
