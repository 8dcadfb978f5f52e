"""A clock a test moves by hand: "seven days pass" in an instant, and nothing waits on time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """Callable like the services' ``Clock``; ``advance`` moves it forward.

    It starts at the real time unless told otherwise, so records it stamps look ordinary to
    the parts that read the real clock (timers on the event loop).
    """

    def __init__(self, now: datetime | None = None) -> None:
        self.now = datetime.now(UTC) if now is None else now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: float | timedelta) -> None:
        """Move forward ``by`` (seconds, or a timedelta)."""
        self.now += by if isinstance(by, timedelta) else timedelta(seconds=by)
