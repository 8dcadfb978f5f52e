"""The active lease behaves alike in the fake and in SQL: stored once, changed only by a
compare-and-set on its epoch, and a guarded commit refused once another process holds it."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory
from tests.unit.contracts.records import NOW, at

from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.base.errors import NotActive
from ficc.domain.lease import ACTIVE_LEASE, Lease
from ficc.services.lease import LeaseKeeper
from ficc.services.ports import CommitGuard, UnitOfWorkFactory


def a_lease(holder: str = "alpha", epoch: int = 1, *, until: float = 10) -> Lease:
    return Lease(
        name=ACTIVE_LEASE, holder=holder, epoch=epoch, acquired_at=NOW, expires_at=at(until)
    )


def guarded(uow_factory: UnitOfWorkFactory, guard: CommitGuard) -> UnitOfWorkFactory:
    """Units of work over the same storage whose commits ``guard`` checks."""
    if isinstance(uow_factory, FakeUnitOfWorkFactory):
        return FakeUnitOfWorkFactory(uow_factory.store, guard)
    assert isinstance(uow_factory, SqlUnitOfWorkFactory)
    return SqlUnitOfWorkFactory(uow_factory.database, guard)


async def test_a_lease_is_stored_once_and_changed_only_from_the_epoch_it_was_read_at(
    uow_factory: UnitOfWorkFactory,
) -> None:
    async with uow_factory() as uow:
        assert await uow.leases.get(ACTIVE_LEASE) is None
        assert await uow.leases.put(a_lease(), expected_epoch=None)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.leases.get(ACTIVE_LEASE, for_update=True) == a_lease()
        taken = a_lease("beta", 2, until=20)
        assert not await uow.leases.put(taken, expected_epoch=2)
        assert await uow.leases.get(ACTIVE_LEASE) == a_lease()
        assert await uow.leases.put(taken, expected_epoch=1)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.leases.get(ACTIVE_LEASE) == taken
    async with uow_factory() as uow:
        # A second first lease: another process inserted it meanwhile.
        assert not await uow.leases.put(a_lease("gamma"), expected_epoch=None)
    async with uow_factory() as uow:
        assert await uow.leases.get(ACTIVE_LEASE) == taken


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_a_commit_under_a_lease_another_process_took_is_refused_and_changes_nothing(
    uow_factory: UnitOfWorkFactory,
) -> None:
    clock = Clock(NOW)
    alpha = LeaseKeeper(uow_factory, clock, "alpha", 3600)
    assert await alpha.try_acquire()
    as_alpha = guarded(uow_factory, alpha)
    async with as_alpha() as uow:
        await uow.settings.put("effect", 1)
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.leases.get(ACTIVE_LEASE)
        assert stored is not None
        assert stored.epoch == 1
        # beta took over (alpha's lease lapsed while alpha was paused, say).
        assert await uow.leases.put(replace(stored, holder="beta", epoch=2), expected_epoch=1)
        await uow.commit()
    async with as_alpha() as uow:
        await uow.settings.put("effect", 2)
        with pytest.raises(NotActive):
            await uow.commit()
    assert alpha.fenced
    assert alpha.lost.is_set()
    async with uow_factory() as uow:
        assert await uow.settings.get("effect") == 1
    assert not await alpha.try_acquire(), "a fenced process never takes the lease again"
