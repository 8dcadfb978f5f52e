"""Holding the active lease: one ``ficc serve`` of those sharing a database acts, the others wait.

:class:`LeaseKeeper` takes the lease (``acquire`` waits for it), renews it in the background
(``keep``) and is the commit guard of every unit of work of its process: each transaction
checks, just before it commits, that this process still holds the lease under the epoch it took
it with, the lease's row held shared so that no takeover commits in between (a takeover needs
the row for update). An effect is therefore fenced *in the same transaction* as the effect.
Effects outside the database (an engine launched, a peer answered) follow a transaction that
recorded them first (write-ahead), and :meth:`LeaseKeeper.active` also fails on the process's
own clock once a lapse has passed without a renewal: a process paused past its lease sees it
lost before anything else it does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Final, Literal

from ficc.base.errors import NotActive
from ficc.domain.lease import ACTIVE_LEASE, Lease, claim, holds, renew_every, renewal
from ficc.services.ports import Clock, LeasesRepository, UnitOfWorkFactory

log = logging.getLogger("ficc.lease")

Role = Literal["active", "standby"]
ACTIVE: Final = "active"
STANDBY: Final = "standby"
STANDBY_POLL_SECONDS: Final = 1.0
"""How often a standby looks for a lapsed or released lease, at most: a clean stop of the
active (an upgrade) is taken over within about this long."""


@dataclass(eq=False)
class LeaseKeeper:
    """This process's claim on the active lease, and the guard its units of work commit under.

    ``uow_factory`` must be unguarded (the keeper's own transactions are the lease's).
    """

    uow_factory: UnitOfWorkFactory
    clock: Clock
    holder: str
    lapse_seconds: float
    _: KW_ONLY
    name: str = ACTIVE_LEASE
    epoch: int | None = field(default=None, init=False)
    """The fencing token: the epoch this process took the lease under; None before."""
    _valid_until: float = field(default=0.0, init=False)
    """Loop time until which the last renewal vouches for the lease."""
    fenced: bool = field(default=False, init=False)
    """The lease was held and is lost: this process never acts again."""
    lost: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    @property
    def interval_seconds(self) -> float:
        return renew_every(self.lapse_seconds)

    def active(self) -> bool:
        """Held, not lost, and renewed less than a lapse ago by this process's own clock."""
        return (
            self.epoch is not None
            and not self.fenced
            and asyncio.get_running_loop().time() < self._valid_until
        )

    @property
    def role(self) -> Role:
        return ACTIVE if self.active() else STANDBY

    async def try_acquire(self) -> bool:
        """Take the lease if none holds it or it lapsed; True when this process holds it."""
        if self.fenced:
            return False
        started = asyncio.get_running_loop().time()
        async with self.uow_factory() as uow:
            current = await uow.leases.get(self.name, for_update=True)
            taken = claim(current, self.name, self.holder, self.clock(), self.lapse_seconds)
            if taken is None:
                return False
            expected = None if current is None else current.epoch
            if not await uow.leases.put(taken, expected_epoch=expected):
                return False
            await uow.commit()
        self._took(taken, started)
        log.info("took the active lease", extra={"epoch": taken.epoch, "holder": self.holder})
        return True

    async def acquire(self) -> None:
        """Wait until this process holds the lease (at once when no other does). The holder
        may be on another machine: only polling the database can tell when it lapsed."""
        while True:
            if await self._attempt(self.try_acquire):
                return
            await asyncio.sleep(min(STANDBY_POLL_SECONDS, self.interval_seconds))

    async def renew(self) -> bool:
        """Extend the lease; False (and lost from then on) when another took it or it lapsed."""
        if not self.active():
            self._lose("the lease lapsed before it was renewed")
            return False
        assert self.epoch is not None
        started = asyncio.get_running_loop().time()
        async with self.uow_factory() as uow:
            current = await uow.leases.get(self.name, for_update=True)
            renewed = renewal(current, self.holder, self.epoch, self.clock(), self.lapse_seconds)
            if renewed is None or not await uow.leases.put(renewed, expected_epoch=self.epoch):
                self._lose("another process holds the lease")
                return False
            await uow.commit()
        self._took(renewed, started)
        return True

    async def keep(self) -> None:
        """Renew until the lease is lost (then ``lost`` is set), a database error tolerated
        until the lease would lapse."""
        while not self.fenced:
            await asyncio.sleep(self.interval_seconds)
            if not await self._attempt(self.renew) and not self.active():
                self._lose("the lease could not be renewed in time")

    async def release(self) -> None:
        """At a clean shutdown: let the lease lapse now, so that a standby takes over at once."""
        if not self.active():
            return
        assert self.epoch is not None
        async with self.uow_factory() as uow:
            current = await uow.leases.get(self.name, for_update=True)
            ended = renewal(current, self.holder, self.epoch, self.clock(), 0.0)
            if ended is not None and await uow.leases.put(ended, expected_epoch=self.epoch):
                await uow.commit()
        self.fenced = True

    async def check(self, leases: LeasesRepository) -> None:
        """The commit guard: NotActive, and nothing committed, unless this process holds the
        lease under its epoch now (read in the committing transaction, its row held shared)."""
        if not self.active():
            raise NotActive(self._why())
        assert self.epoch is not None
        current = await leases.get(self.name)
        if not holds(current, self.holder, self.epoch, self.clock()):
            self._lose("another process holds the lease")
            raise NotActive(self._why())

    def _why(self) -> str:
        if self.fenced:
            return "this FICC process lost the active lease; another one serves the cluster"
        return "this FICC process is the standby; the active one serves the cluster"

    def _took(self, lease: Lease, started: float) -> None:
        self.epoch = lease.epoch
        self._valid_until = started + self.lapse_seconds

    def _lose(self, reason: str) -> None:
        if self.epoch is None or self.fenced:
            return
        self.fenced = True
        log.warning("lost the active lease: %s", reason, extra={"epoch": self.epoch})
        self.lost.set()

    async def _attempt(self, step: Callable[[], Awaitable[bool]]) -> bool:
        try:
            return await step()
        except NotActive:
            raise
        except Exception:  # the outermost handler of the lease's background work
            log.exception("the lease's database did not answer")
            return False
