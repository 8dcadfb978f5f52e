"""Fencing by attempt ID: find engine processes whose environment names an attempt, and end them.

A replica attempt recorded but not yet known to have launched (FICC died in between) has no pid
on record. Every engine FICC launches carries ``FICC_ATTEMPT=<attempt id>`` in its environment,
so such a process can still be found, and killed before a new attempt starts.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Final

from ficc.adapters.runtimes.processes import fence, process_identity
from ficc.services.ports.runtimes import FenceResult

ATTEMPT_VARIABLE: Final = b"FICC_ATTEMPT="
PROC: Final = Path("/proc")


def processes_of_attempt(attempt_id: str, proc: Path = PROC) -> list[int]:
    """PIDs whose environment holds exactly ``FICC_ATTEMPT=attempt_id``."""
    wanted = ATTEMPT_VARIABLE + attempt_id.encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted in environment.split(b"\0"):
            found.append(int(entry.name))
    return found


async def fence_attempt(attempt_id: str, grace_seconds: float) -> int:
    """End every process of ``attempt_id``; the number ended."""
    pids = await asyncio.to_thread(processes_of_attempt, attempt_id)
    ended = 0
    for pid in pids:
        try:
            identity = process_identity(pid)
        except (OSError, ValueError, LookupError):
            continue
        if await fence(identity, grace_seconds) is FenceResult.KILLED:
            ended += 1
    return ended
