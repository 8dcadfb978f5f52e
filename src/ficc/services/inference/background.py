"""The supervisor's background work: kept while it runs, cancelled together at a shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine

log = logging.getLogger("ficc.inference")


class BackgroundTasks:
    """Tasks that run ``work`` and log what escapes it (they are the outermost handler)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[object, object, None]) -> None:
        """Run ``work`` in the background, kept until it ends or :meth:`cancel_all`.

        A task cancelled before its first step never runs ``work``: it is closed then, so that
        a shutdown right after a start leaves no never-awaited coroutine behind.
        """

        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:  # the outermost handler of a background task
                log.exception("background inference work failed")

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            work.close()

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(done)

    async def cancel_all(self) -> None:
        """Cancel every task and wait until each has ended."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
