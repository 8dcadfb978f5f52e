"""What happens when a replica's engine ends by itself: the restart policy and the crash loop."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final


class RestartPolicy(StrEnum):
    """What FICC does when a replica's engine ends without being asked (systemd's words).

    ``on-failure``: started again after an unclean end (an exit code other than 0, a signal, a
    lost node); ``always``: after any end; ``never``: the service is ``failed`` at once.
    """

    ON_FAILURE = "on-failure"
    ALWAYS = "always"
    NEVER = "never"

    def restarts(self, clean_exit: bool) -> bool:
        """Whether an engine that ended by itself (cleanly or not) is started again."""
        if self is RestartPolicy.NEVER:
            return False
        return self is RestartPolicy.ALWAYS or not clean_exit


DEFAULT_RESTART: Final = RestartPolicy.ON_FAILURE


RESTART_FIRST_DELAY_SECONDS: Final = 1.0
RESTART_MAX_DELAY_SECONDS: Final = 300.0
"""The backoff doubles from 1 s to at most 5 minutes between a crash and the next start."""
CRASH_WINDOW_SECONDS: Final = 600.0
MAX_CRASHES_IN_WINDOW: Final = 5
"""Five crashes within 10 minutes end the restarts: the service is ``failed``."""
BACKOFF_RESET_SECONDS: Final = 600.0
"""An engine that ran this long before it crashed starts the backoff again at 1 s."""


@dataclass(frozen=True)
class CrashLoop:
    """A service's recent crashes (those within the window) and the crashes since its engines
    last ran long enough to reset the backoff."""

    crashes: tuple[datetime, ...] = ()
    consecutive: int = 0

    def after_crash(self, now: datetime, running_since: datetime | None) -> CrashLoop:
        """The loop once a crash at ``now`` is counted; ``running_since``: when the service
        last became running (None: it never did since the last start)."""
        window = timedelta(seconds=CRASH_WINDOW_SECONDS)
        recent = (*(t for t in self.crashes if now - t < window), now)
        consecutive = self.consecutive
        if running_since is not None and now - running_since >= timedelta(
            seconds=BACKOFF_RESET_SECONDS
        ):
            consecutive = 0
        return CrashLoop(recent, consecutive + 1)

    @property
    def gives_up(self) -> bool:
        """Too many crashes within the window: no further restart."""
        return len(self.crashes) >= MAX_CRASHES_IN_WINDOW

    def delay_seconds(self) -> float:
        """How long to wait before the next start: 1 s, 2 s, 4 s, … at most 5 minutes."""
        exponent = min(max(self.consecutive - 1, 0), 32)
        return min(RESTART_FIRST_DELAY_SECONDS * 2.0**exponent, RESTART_MAX_DELAY_SECONDS)


@dataclass(frozen=True)
class RestartDecision:
    """What to do after a replica ended by itself: start again after ``delay_seconds``, or not
    (``reason`` says why, for the service's error)."""

    restart: bool
    loop: CrashLoop
    delay_seconds: float = 0.0
    reason: str | None = None


def decide_restart(
    policy: RestartPolicy,
    *,
    clean_exit: bool,
    loop: CrashLoop,
    now: datetime,
    running_since: datetime | None,
) -> RestartDecision:
    """The restart policy and the crash loop's bound applied to one crash at ``now``."""
    if not policy.restarts(clean_exit):
        return RestartDecision(False, loop, reason=f"restart policy is {policy.value}")
    counted = loop.after_crash(now, running_since)
    if counted.gives_up:
        return RestartDecision(
            False,
            counted,
            reason=(
                f"crashed {len(counted.crashes)} times within {int(CRASH_WINDOW_SECONDS)} s; "
                "not restarted again"
            ),
        )
    return RestartDecision(True, counted, delay_seconds=counted.delay_seconds())
