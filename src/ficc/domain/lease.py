"""The active lease: which of the ``ficc serve`` processes sharing one database may act.

One row names the holder, an epoch and when the lease lapses. A process takes the lease when
there is none or the last one has lapsed, and each taking raises the epoch by one: the epoch is
the fencing token every effect of the holder is checked against. Only the holder renews, and
only while its lease has not lapsed; a lapsed lease is taken anew, under a new epoch, even by
the process that held it (it may have been paused while another took over and let go).
Pure rules: the time is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

ACTIVE_LEASE: Final = "active"
"""The one lease the processes of a cluster contend for."""
DEFAULT_LAPSE_SECONDS: Final = 10.0
"""A holder that has not renewed for this long has lost the lease (issue: "lapses for 10 s")."""
RENEWALS_PER_LAPSE: Final = 4
"""The holder renews this many times per lapse: three renewals may fail before it is lost."""


@dataclass(frozen=True)
class Lease:
    """The stored lease: who holds it, under which epoch, until when."""

    name: str
    holder: str
    epoch: int
    acquired_at: datetime
    expires_at: datetime

    def lapsed(self, now: datetime) -> bool:
        return now >= self.expires_at


def renew_every(lapse_seconds: float) -> float:
    """How often the holder renews (and a standby tries to take over)."""
    return lapse_seconds / RENEWALS_PER_LAPSE


def claim(
    current: Lease | None, name: str, holder: str, now: datetime, lapse_seconds: float
) -> Lease | None:
    """The lease ``holder`` takes now, or None while another holds an unlapsed one.

    A holder that still holds its lease gets it renewed, under the same epoch.
    """
    until = now + timedelta(seconds=lapse_seconds)
    if current is None:
        return Lease(name=name, holder=holder, epoch=1, acquired_at=now, expires_at=until)
    if not current.lapsed(now):
        if current.holder == holder:
            return replace(current, expires_at=until)
        return None
    return Lease(
        name=name, holder=holder, epoch=current.epoch + 1, acquired_at=now, expires_at=until
    )


def renewal(
    current: Lease | None, holder: str, epoch: int, now: datetime, lapse_seconds: float
) -> Lease | None:
    """The lease extended from now, or None when ``holder`` no longer holds it under
    ``epoch`` (another took it, or it lapsed: a lapsed lease is never renewed)."""
    if not holds(current, holder, epoch, now):
        return None
    assert current is not None
    return replace(current, expires_at=now + timedelta(seconds=lapse_seconds))


def holds(current: Lease | None, holder: str, epoch: int, now: datetime) -> bool:
    """Whether ``holder`` holds the lease under ``epoch`` at ``now``: the fencing check."""
    return (
        current is not None
        and current.holder == holder
        and current.epoch == epoch
        and not current.lapsed(now)
    )
