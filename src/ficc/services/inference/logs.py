"""An engine's log for the operator: what a service's replica wrote, bounded, read by offset
so that a caller can follow it by asking again from where it stopped.

Logs hold engine text (paths, addresses, anything an engine prints): they are for local
credentials holding ``inference:read`` only. No remote operation reads them, and a peer's view
of a service (``services/remote/views.py``) leaves out even the log lines of a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypedDict

from ficc.base.errors import InvalidInput, NotFound
from ficc.base.ids import parse_id
from ficc.base.units import KiB
from ficc.domain.service_records import AttemptRecord
from ficc.services.inference.records import load_service
from ficc.services.ports import UnitOfWorkFactory
from ficc.services.ports.runtimes import EngineLogs, LogChunk

DEFAULT_LOG_LINES: Final = 100
MAX_LOG_LINES: Final = 1000
MAX_LOG_READ_BYTES: Final = 256 * KiB
"""Read at most this much of a log per call: a follower asks again from ``next``."""


_NO_LOG: Final = LogChunk(found=False, lines=(), next=0, more=False)
"""What a page says when the replica has no attempt yet."""


class LogOf(TypedDict):
    """Which log a page is of: the service, the replica and attempt, and the replica's newest
    attempt (a follower moves on to it)."""

    service: str
    replica: int | None
    attempt: str | None
    latest: str | None


class LogPage(LogOf):
    """A page of a replica's log: :class:`LogOf` and a :class:`LogChunk`'s lines, with where
    the next page starts."""

    found: bool
    lines: list[str]
    next: int
    more: bool


@dataclass(frozen=True, eq=False)
class ServiceLogs:
    """Reads a service's engine log: the newest attempt's, a replica's, or a named attempt's."""

    uow_factory: UnitOfWorkFactory
    logs: EngineLogs

    async def read(
        self,
        project: str,
        service_id: str,
        *,
        replica: int | None = None,
        attempt: str | None = None,
        after: int | None = None,
        lines: int = DEFAULT_LOG_LINES,
    ) -> LogPage:
        """``{"service", "replica", "attempt", "latest", "found", "lines", "next", "more"}``.

        ``latest`` is the newest attempt of the same replica (of any, when none is named): a
        follower that reads ``more: false`` and a newer ``latest`` moves on to it.
        """
        if not 1 <= lines <= MAX_LOG_LINES:
            raise InvalidInput(f"lines must be 1 .. {MAX_LOG_LINES}", field="lines")
        if after is not None and after < 0:
            raise InvalidInput("after must be a byte offset, 0 or more", field="after")
        if replica is not None and replica < 0:
            raise InvalidInput("replica must be 0 or more", field="replica")
        if attempt is not None:
            parse_id("attempt", attempt, field="attempt")
        async with self.uow_factory() as uow:
            service = await load_service(uow, project, service_id)
            attempts = await uow.attempts.for_service(service.id)
        chosen = _choose(attempts, replica, attempt, service_id)
        if replica is None and chosen is not None:
            replica = chosen.replica
        same_replica = [a for a in attempts if replica is None or a.replica == replica]
        latest = _newest(same_replica)
        of = LogOf(
            service=service.id,
            replica=replica,
            attempt=None if chosen is None else chosen.id,
            latest=None if latest is None else latest.id,
        )
        chunk = _NO_LOG
        if chosen is not None:
            chunk = await self.logs.read(
                service.id, chosen.id, after=after, lines=lines, max_bytes=MAX_LOG_READ_BYTES
            )
        return {
            **of,
            "found": chunk.found,
            "lines": list(chunk.lines),
            "next": chunk.next,
            "more": chunk.more,
        }


def _newest(attempts: list[AttemptRecord]) -> AttemptRecord | None:
    return max(attempts, key=lambda a: (a.created_at, a.id), default=None)


def _choose(
    attempts: list[AttemptRecord], replica: int | None, attempt: str | None, service_id: str
) -> AttemptRecord | None:
    """The attempt named, else the newest of ``replica`` (of any replica when None)."""
    if attempt is not None:
        for record in attempts:
            if record.id == attempt:
                if replica is not None and record.replica != replica:
                    raise InvalidInput(
                        f"attempt {attempt} ran replica {record.replica}, not {replica}",
                        field="attempt",
                    )
                return record
        raise NotFound(
            f"no attempt {attempt} of service {service_id}",
            details={"service": service_id, "attempt": attempt},
        )
    return _newest([a for a in attempts if replica is None or a.replica == replica])
