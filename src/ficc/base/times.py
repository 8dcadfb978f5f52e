"""RFC 3339 UTC timestamps: the one format for times in the API and the database.

The API, receipts and the wire show :func:`format_time` (no fraction when there is none). The
database stores :func:`format_stored_time`, whose fixed width makes text order time order, so
that SQL can compare and sort times as text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def format_time(moment: datetime) -> str:
    """``2026-11-29T12:00:00.123456Z``; naive datetimes are taken as UTC."""
    if moment.tzinfo is UTC:
        return moment.isoformat().replace("+00:00", "Z")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def format_stored_time(moment: datetime) -> str:
    """``2026-11-29T12:00:00.000000Z``: always 27 characters, microseconds always present.

    Without the fixed width, ``12:00:00Z`` sorts after ``12:00:00.5Z`` (``Z`` > ``.``), so a
    comparison such as ``expires_at > now`` made on text could be wrong by up to a second.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_time(text: str) -> datetime:
    """The inverse of :func:`format_time` and :func:`format_stored_time`, always
    timezone-aware."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def with_times_formatted(value: Any) -> Any:
    """``value`` with every datetime inside it (dicts, lists) as an RFC 3339 string."""
    if isinstance(value, dict):
        return {key: with_times_formatted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [with_times_formatted(item) for item in value]
    if isinstance(value, datetime):
        return format_time(value)
    return value
