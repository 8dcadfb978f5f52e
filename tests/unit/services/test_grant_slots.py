"""The ``concurrent`` slots of a grant: a request right behind a cancelled one is served once
the cancel lands; a grant that stays full refuses within a bounded wait."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ficc.base.errors import GrantRevoked, LimitExceeded
from ficc.services.grant_slots import FULL_WAIT_SECONDS, GrantSlots, Slot
from ficc.services.peer_channel import ending_reason

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(days=1)


async def held(slots: GrantSlots, holding: asyncio.Event) -> None:
    async with slots.slot("grt_x", 1, LATER, NOW):
        holding.set()
        await asyncio.Event().wait()


async def test_a_request_following_a_cancelled_one_on_a_full_grant_is_served() -> None:
    slots = GrantSlots()
    holding = asyncio.Event()
    first = asyncio.create_task(held(slots, holding))
    await holding.wait()
    # The caller abandons its request and sends the next one at once: the cancel has not
    # landed when the next request is admitted.
    first.cancel()
    async with slots.slot("grt_x", 1, LATER, NOW):
        assert slots.in_flight("grt_x") == 1
    assert first.cancelled()
    assert slots.in_flight("grt_x") == 0


async def test_a_grant_that_stays_full_refuses_naming_concurrent_within_the_wait() -> None:
    slots = GrantSlots()
    holding = asyncio.Event()
    first = asyncio.create_task(held(slots, holding))
    await holding.wait()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(LimitExceeded) as refused:
        async with slots.slot("grt_x", 1, LATER, NOW):
            pass
    waited = loop.time() - started
    assert refused.value.details == {"limit": "concurrent", "allowed": 1}
    assert FULL_WAIT_SECONDS - 0.05 <= waited <= FULL_WAIT_SECONDS + 0.5
    assert slots.in_flight("grt_x") == 1
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert slots.in_flight("grt_x") == 0


async def test_a_guarded_stream_starts_no_task_per_item_and_ending_its_grant_stops_it() -> None:
    """One way to end a request: ending the grant cancels the serving task wherever it waits
    (here on a stalled engine), with the reason; the chunks cost no task each."""
    slots = GrantSlots()
    loop = asyncio.get_running_loop()
    created: list[object] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **options)

    delivered, closed = asyncio.Event(), asyncio.Event()
    held: list[Slot] = []

    async def engine() -> AsyncIterator[bytes]:
        try:
            for _ in range(100):
                yield b"x"
            delivered.set()
            await asyncio.Event().wait()  # the engine stalls
        finally:
            closed.set()

    async def serve() -> int:
        async with slots.slot("grt_x", 1, LATER, NOW) as slot:
            held.append(slot)
            return len([chunk async for chunk in slot.guard(engine())])

    loop.set_task_factory(counting)
    try:
        serving = asyncio.create_task(serve())
        await delivered.wait()
    finally:
        loop.set_task_factory(None)
    assert len(created) == 1  # the serving task alone
    held[0].end(GrantRevoked("the grant was revoked"))
    with pytest.raises(asyncio.CancelledError) as ended:
        await serving
    assert isinstance(ending_reason(ended.value), GrantRevoked)
    assert closed.is_set()
    assert slots.in_flight("grt_x") == 0
