"""A loop-lag watchdog: measures the longest time any callback held the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

MAX_LOOP_HOLD_SECONDS = 0.1
"""No callback may hold the loop longer: peers are declared dead after 3.5 s of silence, and a
heartbeat must never wait behind a probe or a start."""

TICK_SECONDS = 0.005


@dataclass
class LoopLag:
    """The worst lag seen: how much later than asked a tick of the watchdog ran."""

    worst_seconds: float = 0.0
    ticks: int = 0
    armed_at: float = 0.0

    def record(self, now: float) -> None:
        """The tick armed at ``armed_at`` runs (or is checked) at ``now``."""
        self.worst_seconds = max(self.worst_seconds, now - self.armed_at - TICK_SECONDS)


@asynccontextmanager
async def loop_watchdog() -> AsyncIterator[LoopLag]:
    """Tick every few milliseconds while the block runs; record the worst lateness."""
    lag = LoopLag()

    async def watch() -> None:
        while True:
            lag.armed_at = time.monotonic()
            await asyncio.sleep(TICK_SECONDS)
            lag.record(time.monotonic())
            lag.ticks += 1

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)  # the first tick is armed before the work starts
    try:
        yield lag
    finally:
        # A block that held the loop to its very end leaves its tick pending: count it too.
        lag.record(time.monotonic())
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
