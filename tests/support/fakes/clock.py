"""A clock a test moves by hand: "seven days pass" in an instant, and nothing waits on time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class FakeClock:
    """Callable like the services' ``Clock``; ``advance`` moves it forward."""

    def __init__(self, now: datetime = EPOCH) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
