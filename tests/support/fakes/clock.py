"""A clock the test moves by hand, for services given a ``Clock``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """Starts at the real time (so records look ordinary) and moves only when told."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = datetime.now(UTC) if start is None else start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta
