"""What runs inside a replica's Ray actor, on its node: the engine process and its end.

This module does not import Ray: the Ray runtime turns :class:`EngineHost` into an actor class.
The engine is the actor's child, started through ``parent_guard`` so that it dies with the
actor; the actor verifies the model file by its digest before launching.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ficc.adapters.runtimes.processes import EngineProcess, engine_environment, free_loopback_port
from ficc.services.runtimes import ReplicaExit

HASH_CHUNK_BYTES: Final = 4 * 1024 * 1024
GUARD_SCRIPT: Final = Path(__file__).with_name("parent_guard.py")
"""Run by path: the engine's small environment has no PYTHONPATH to find FICC's modules by."""
_SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")


class ModelFileRefused(Exception):
    """The model file is missing on this node or its bytes do not match its digest."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def verify_model_file(path: Path) -> None:
    """The blob store names a model file by its SHA-256: rehash it here, on the node."""
    if not _SHA256_NAME.fullmatch(path.name):
        raise ModelFileRefused(f"{path.name} is not a blob named by its SHA-256")
    if not path.is_file():
        raise ModelFileRefused(f"blob {path.name} is not on this node")
    actual = file_sha256(path)
    if actual != path.name:
        raise ModelFileRefused(f"blob {path.name} on this node has SHA-256 {actual}")


class EngineHost:
    """One engine on one node, owned by one Ray actor."""

    def __init__(self) -> None:
        self._process: EngineProcess | None = None

    async def reserve_port(self) -> int:
        """A loopback port free on this node now, for the engine's command line."""
        return free_loopback_port()

    async def start(
        self,
        argv: Sequence[str],
        variables: Mapping[str, str],
        log_path: str,
        model_path: str | None,
    ) -> tuple[int, int]:
        """Verify the model, start the engine; its pid and start ticks.

        ``variables`` (the attempt and its API key) reach the engine through its environment,
        never its command line.
        """
        if self._process is not None:
            raise RuntimeError("this actor started its engine already")
        if model_path is not None:
            await asyncio.to_thread(verify_model_file, Path(model_path))
        guarded = [sys.executable, str(GUARD_SCRIPT), str(os.getpid()), *argv]
        self._process = await EngineProcess.spawn(
            guarded, log_path=Path(log_path), env=engine_environment(variables)
        )
        return self._process.identity.pid, self._process.identity.start_ticks

    async def identity(self) -> tuple[int, int] | None:
        """The engine's pid and start ticks, if it was started."""
        if self._process is None:
            return None
        return self._process.identity.pid, self._process.identity.start_ticks

    async def wait(self) -> ReplicaExit:
        """Return when the engine ends."""
        if self._process is None:
            raise RuntimeError("no engine was started")
        return await self._process.wait()

    async def stop(self, grace_seconds: float) -> ReplicaExit | None:
        """SIGTERM, SIGKILL after the grace period; None when no engine was started."""
        if self._process is None:
            return None
        return await self._process.stop(grace_seconds)
