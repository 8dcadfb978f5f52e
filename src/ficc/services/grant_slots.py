"""Requests in flight under each grant: the ``concurrent`` limit, and ending them on revoke.

A slot is taken at admission and given back on every exit path (the context manager's exit
runs on success, error, timeout and cancellation). Ending a grant (revocation, expiry, peer
removal) ends every request holding one of its slots: the slot keeps the task that serves its
request and cancels it, wherever it waits (on the engine, or on a write to a peer that stopped
reading), so the slot and the engine request are freed at once and the peer receives
``grant_revoked`` or ``grant_expired``, not a silent stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime
from typing import Final, TypeVar

from ficc.base.errors import FiccError, GrantExpired, LimitExceeded
from ficc.services.ports.peers import end_request

T = TypeVar("T")


class Slot:
    """One admitted request and the task serving it; ``ended`` is set when its grant ends."""

    def __init__(self, task: asyncio.Task[object] | None = None) -> None:
        self.ended = asyncio.Event()
        self.reason: FiccError | None = None
        self.task = task

    def end(self, reason: FiccError) -> None:
        """End the request now: its serving task is cancelled with ``reason``.

        Setting ``ended`` alone is not enough: a task blocked writing to a peer that stopped
        reading never looks at it again.
        """
        if self.reason is not None:
            return
        self.reason = reason
        self.ended.set()
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            end_request(task, reason)

    def check(self) -> None:
        """Raise the reason the grant ended, if it did (before work the task begins)."""
        if self.reason is not None:
            raise self.reason

    async def guard(self, items: AsyncIterator[T]) -> AsyncGenerator[T, None]:
        """The items of ``items`` until it ends or the grant ends.

        The serving task is cancelled by :meth:`end` wherever it waits, so each item costs
        no task; the reason is checked before each. ``items`` is closed on every exit, at
        once: when the grant ends while ``items`` waits at a ``yield`` (its last item still
        being sent), nothing cancels it, and left to the garbage collector it would keep its
        engine stream generating.
        """
        iterator = aiter(items)
        try:
            while True:
                self.check()
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    return
                yield item
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await close()


FULL_WAIT_SECONDS: Final = 1.0
"""How long a request on a full grant waits for a slot before ``concurrent`` refuses it: a
cancelled request frees its slot only once its cancel lands, which the next request of the
same caller may overtake."""


class GrantSlots:
    def __init__(self) -> None:
        self._slots: dict[str, set[Slot]] = {}
        self._released: dict[str, asyncio.Event] = {}

    def in_flight(self, grant_id: str) -> int:
        return len(self._slots.get(grant_id, ()))

    def in_flight_by_grant(self) -> dict[str, int]:
        """Requests in flight under each grant that has any (for the metrics)."""
        return {grant_id: len(slots) for grant_id, slots in self._slots.items()}

    @contextlib.asynccontextmanager
    async def slot(
        self, grant_id: str, concurrent: int, expires_at: datetime, now: datetime
    ) -> AsyncIterator[Slot]:
        """Hold one of ``concurrent`` slots; refuse naming the limit when none frees within
        :data:`FULL_WAIT_SECONDS`."""
        await self._room(grant_id, concurrent)
        # The task admitting the request is the one serving it, to its last byte.
        slot = Slot(asyncio.current_task())
        slots = self._slots.setdefault(grant_id, set())
        slots.add(slot)
        loop = asyncio.get_running_loop()
        expiry = loop.call_later(
            max((expires_at - now).total_seconds(), 0),
            slot.end,
            GrantExpired("the grant expired", details={"grant": grant_id}),
        )
        try:
            yield slot
        finally:
            expiry.cancel()
            slots.discard(slot)
            if not slots:
                self._slots.pop(grant_id, None)
            released = self._released.pop(grant_id, None)
            if released is not None:
                released.set()

    async def _room(self, grant_id: str, concurrent: int) -> None:
        """Return once the grant has a free slot; LimitExceeded when none frees in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FULL_WAIT_SECONDS
        while self.in_flight(grant_id) >= concurrent:
            left = deadline - loop.time()
            if left <= 0:
                raise LimitExceeded(
                    f"the grant allows {concurrent} concurrent requests; all are in use",
                    details={"limit": "concurrent", "allowed": concurrent},
                )
            released = self._released.setdefault(grant_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await released.wait()

    def end_all(self, grant_id: str, reason: FiccError) -> int:
        """End every request in flight under a grant."""
        slots = list(self._slots.get(grant_id, ()))
        for slot in slots:
            slot.end(reason)
        return len(slots)
