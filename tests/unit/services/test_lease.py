"""The active lease's rules on the fake unit of work and virtual time: the first process takes
it, the holder renews it, a standby takes it only once it lapsed (under the next epoch), and a
holder that lost it (paused past its lease, or another took over) commits nothing again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import pytest
from tests.support.fakes.loop_clock import LoopWallClock, run_virtual
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.base.errors import NotActive
from ficc.domain.lease import ACTIVE_LEASE, Lease, claim, holds, renewal
from ficc.services.lease import ACTIVE, STANDBY, LeaseKeeper

LAPSE = 10.0


def virtual(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    def run() -> None:
        run_virtual(test())

    run.__name__ = test.__name__
    return run


def pair() -> tuple[FakeUnitOfWorkFactory, LeaseKeeper, LeaseKeeper, LoopWallClock]:
    storage = FakeUnitOfWorkFactory()
    clock = LoopWallClock()
    return (
        storage,
        LeaseKeeper(storage, clock, "alpha", LAPSE),
        LeaseKeeper(storage, clock, "beta", LAPSE),
        clock,
    )


def stored(storage: FakeUnitOfWorkFactory) -> Lease:
    return storage.store.leases[ACTIVE_LEASE]


def test_rules_take_a_free_or_lapsed_lease_under_the_next_epoch_and_renew_only_a_held_one() -> None:
    now = LoopWallClock().now
    first = claim(None, ACTIVE_LEASE, "alpha", now, LAPSE)
    assert first is not None
    assert (first.holder, first.epoch) == ("alpha", 1)
    assert claim(first, ACTIVE_LEASE, "beta", now + timedelta(seconds=9.9), LAPSE) is None
    again = claim(first, ACTIVE_LEASE, "alpha", now + timedelta(seconds=5), LAPSE)
    assert again is not None
    assert again.epoch == 1, "the holder's claim renews its lease"
    lapsed = now + timedelta(seconds=LAPSE)
    taken = claim(first, ACTIVE_LEASE, "beta", lapsed, LAPSE)
    assert taken is not None
    assert (taken.holder, taken.epoch) == ("beta", 2)
    assert renewal(first, "alpha", 1, lapsed, LAPSE) is None, "a lapsed lease is not renewed"
    assert renewal(taken, "alpha", 1, lapsed, LAPSE) is None
    assert not holds(taken, "alpha", 1, lapsed)
    assert holds(taken, "beta", 2, lapsed)


@virtual
async def test_the_first_process_is_active_and_the_second_waits_as_standby() -> None:
    storage, alpha, beta, _ = pair()
    assert beta.role == STANDBY
    await alpha.acquire()
    assert alpha.role == ACTIVE
    assert alpha.epoch == 1
    assert not await beta.try_acquire()
    assert beta.role == STANDBY
    with pytest.raises(NotActive):
        await beta.check(storage().leases)


@virtual
async def test_a_renewed_lease_never_lapses_and_the_standby_never_takes_it() -> None:
    storage, alpha, beta, _ = pair()
    await alpha.acquire()
    keeping = asyncio.create_task(alpha.keep())
    waiting = asyncio.create_task(beta.acquire())
    await asyncio.sleep(LAPSE * 30)
    assert alpha.role == ACTIVE
    assert not waiting.done()
    assert (stored(storage).holder, stored(storage).epoch) == ("alpha", 1)
    keeping.cancel()
    waiting.cancel()
    await asyncio.gather(keeping, waiting, return_exceptions=True)


@virtual
async def test_a_lease_left_unrenewed_lapses_within_its_seconds_and_the_standby_takes_it() -> None:
    storage, alpha, beta, _ = pair()
    await alpha.acquire()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await beta.acquire()  # alpha died: nobody renews
    took = loop.time() - started
    assert LAPSE <= took <= LAPSE + beta.interval_seconds
    assert (stored(storage).holder, stored(storage).epoch) == ("beta", 2)
    assert (beta.role, alpha.role) == (ACTIVE, STANDBY)


@virtual
async def test_a_holder_paused_past_its_lease_commits_nothing_when_it_wakes() -> None:
    storage, alpha, beta, _ = pair()
    await alpha.acquire()
    as_alpha = FakeUnitOfWorkFactory(storage.store, alpha)
    await beta.acquire()  # alpha was paused (SIGSTOP) past its lease; beta took over
    # alpha wakes: its own clock already tells it the lease is gone, before any effect.
    assert not alpha.active()
    async with as_alpha() as uow:
        await uow.settings.put("effect", "after the takeover")
        with pytest.raises(NotActive):
            await uow.commit()
    assert not await alpha.renew()
    assert alpha.fenced
    assert alpha.lost.is_set()
    assert "effect" not in storage.store.settings
    assert stored(storage).holder == "beta"


@virtual
async def test_the_epoch_fences_a_holder_whose_clock_still_vouches_for_it() -> None:
    """The guard reads the lease in the committing transaction: a takeover this process's own
    clock has not seen yet (another's clock ran ahead) still refuses its effects."""
    storage, alpha, beta, clock = pair()
    await alpha.acquire()
    as_alpha = FakeUnitOfWorkFactory(storage.store, alpha)
    clock.advance(LAPSE)  # the wall clock alone moves: beta sees a lapsed lease
    assert await beta.try_acquire()
    assert alpha.active(), "by its own clock alpha still holds the lease"
    async with as_alpha() as uow:
        await uow.settings.put("effect", 1)
        with pytest.raises(NotActive):
            await uow.commit()
    assert alpha.fenced
    assert not alpha.active()
    assert "effect" not in storage.store.settings


@virtual
async def test_a_lease_another_took_is_lost_and_a_clean_release_hands_it_over_at_once() -> None:
    storage, alpha, beta, clock = pair()
    await alpha.acquire()
    keeping = asyncio.create_task(alpha.keep())
    clock.advance(LAPSE)
    assert await beta.try_acquire()
    await asyncio.wait_for(alpha.lost.wait(), LAPSE)
    await keeping
    gamma = LeaseKeeper(storage, clock, "gamma", LAPSE)
    await beta.release()
    assert beta.fenced
    assert await gamma.try_acquire(), "a released lease is free at once"
    assert stored(storage).epoch == 3
