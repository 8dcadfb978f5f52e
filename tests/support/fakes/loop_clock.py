"""An event loop on virtual time: when nothing is ready to run, the clock jumps to the next
timer instead of waiting for it, so "a minute passes" takes microseconds.

Everything that reads the loop's clock follows it: ``asyncio.sleep``, ``asyncio.timeout``,
``loop.call_later`` (slot waits, grant expiry in ``GrantSlots``, stall deadlines). Work handed
to threads through ``run_in_executor`` (``asyncio.to_thread``) is waited for in real time, the
clock standing still meanwhile. When every task waits and no timer is due, the loop raises
:class:`WaitsForever` instead of hanging. Code that waits on sockets, or on threads started
otherwise (aiosqlite), is not for this loop: it would see its timers fire early.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tests.support.fakes.clock import FakeClock

T = TypeVar("T")
FileObject = int | Any
"""What a selector watches: a file descriptor or an object with ``fileno()``."""


class WaitsForever(RuntimeError):
    """The loop has nothing left to run and nothing to wait for: a real loop would hang."""


class _Selector(selectors.BaseSelector):
    """The default selector, but a wait with a timeout moves the loop's clock instead."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._inner = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: FileObject, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: FileObject) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: FileObject, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or self._loop.in_threads:
            return ready or self._inner.select(timeout)
        if timeout is None:
            raise WaitsForever(
                "every task waits, and on nothing that will come: no timer, no thread"
            )
        self._loop.advance(timeout)
        return []

    def get_map(self) -> Any:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` starts at 0 and moves only as timers come due."""

    def __init__(self) -> None:
        self._now = 0.0
        self.in_threads = 0
        super().__init__(_Selector(self))
        # A timer is due once the clock is within this of it; the monotonic clock's resolution
        # (a nanosecond) is lost in a float far from 0, and a due timer would never run.
        self._clock_resolution = 1e-6

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(seconds, 0.0)

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.in_threads += 1

        def done(_: asyncio.Future[T]) -> None:
            self.in_threads -= 1

        future.add_done_callback(done)
        return future

    async def shutdown_default_executor(self, *args: Any) -> None:
        """Waited for in real time: a thread joins the executor's and wakes the loop."""
        self.in_threads += 1
        try:
            await super().shutdown_default_executor(*args)
        finally:
            self.in_threads -= 1


class LoopWallClock(FakeClock):
    """The services' clock on the loop's virtual time: ``now`` plus the seconds the loop's
    clock has moved. Timers (``call_later``) and the records' times then agree, as on a real
    machine; ``advance`` still moves the wall clock alone (the system clock was set)."""

    def __call__(self) -> datetime:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self.now
        if not isinstance(loop, VirtualClockLoop):
            raise RuntimeError("a LoopWallClock runs on a VirtualClockLoop (run_virtual)")
        return self.now + timedelta(seconds=loop.time())


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to its end on a fresh :class:`VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)
