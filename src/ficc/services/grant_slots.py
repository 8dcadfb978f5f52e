"""Requests in flight under each grant: the ``concurrent`` limit and cancellation on revoke.

A slot is taken at admission and given back on every exit path (the context manager's exit
runs on success, error, timeout and cancellation). Revoking a grant cancels the tasks that
hold its slots, on this side; the peer is told separately.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ficc.base.errors import LimitExceeded


class GrantSlots:
    def __init__(self) -> None:
        self._holders: dict[str, set[asyncio.Task[object]]] = {}

    def in_flight(self, grant_id: str) -> int:
        return len(self._holders.get(grant_id, ()))

    @contextlib.asynccontextmanager
    async def slot(self, grant_id: str, concurrent: int) -> AsyncIterator[None]:
        """Hold one of ``concurrent`` slots for the current task, or refuse at once."""
        holders = self._holders.setdefault(grant_id, set())
        if len(holders) >= concurrent:
            raise LimitExceeded(
                f"the grant allows {concurrent} concurrent requests; all are in use",
                details={"limit": "concurrent", "allowed": concurrent},
            )
        task = asyncio.current_task()
        assert task is not None
        holders.add(task)
        try:
            yield
        finally:
            holders.discard(task)
            if not holders:
                self._holders.pop(grant_id, None)

    def cancel_all(self, grant_id: str) -> int:
        """Cancel every request in flight under a grant (revocation, expiry, peer removal)."""
        holders = list(self._holders.get(grant_id, ()))
        for task in holders:
            task.cancel()
        return len(holders)
