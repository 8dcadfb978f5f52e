"""The ``concurrent`` slots of a grant: a request right behind a cancelled one is served once
the cancel lands; a grant that stays full refuses after a bounded wait; a request outliving its
grant is ended. The waits run on virtual time: the tests take milliseconds and assert exact
figures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.support.fakes.loop_clock import run_virtual

from ficc.base.errors import GrantExpired, GrantRevoked, LimitExceeded
from ficc.services.grant_slots import FULL_WAIT_SECONDS, GrantSlots, Slot
from ficc.services.ports.peers import ending_reason

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


def test_a_grant_that_stays_full_refuses_naming_concurrent_after_the_wait() -> None:
    async def main() -> None:
        slots = GrantSlots()
        holding = asyncio.Event()
        first = asyncio.create_task(held(slots, holding))
        await holding.wait()
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(LimitExceeded) as refused:
            async with slots.slot("grt_x", 1, LATER, NOW):
                pass
        assert loop.time() - started == FULL_WAIT_SECONDS
        assert refused.value.details == {"limit": "concurrent", "allowed": 1}
        assert slots.in_flight("grt_x") == 1
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert slots.in_flight("grt_x") == 0

    run_virtual(main())


def test_a_slot_freed_within_the_wait_admits_the_waiting_request() -> None:
    async def main() -> None:
        slots = GrantSlots()
        holding = asyncio.Event()
        first = asyncio.create_task(held(slots, holding))
        await holding.wait()
        loop = asyncio.get_running_loop()
        loop.call_later(FULL_WAIT_SECONDS / 2, first.cancel)
        started = loop.time()
        async with slots.slot("grt_x", 1, LATER, NOW):
            assert loop.time() - started == FULL_WAIT_SECONDS / 2
            assert slots.in_flight("grt_x") == 1

    run_virtual(main())


def test_a_request_still_in_flight_when_its_grant_expires_is_ended_naming_grant_expired() -> None:
    async def main() -> None:
        slots = GrantSlots()
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def serve() -> None:
            async with slots.slot("grt_x", 4, NOW + timedelta(hours=1), NOW):
                await asyncio.Event().wait()

        with pytest.raises(asyncio.CancelledError) as ended:
            await asyncio.create_task(serve())
        assert isinstance(ending_reason(ended.value), GrantExpired)
        assert loop.time() - started == 3600
        assert slots.in_flight("grt_x") == 0

    run_virtual(main())


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
