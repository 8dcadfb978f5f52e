"""Calls on a replica's Ray actor: Ray's failures as FICC's errors, and a model sent to a node.

A node whose blob store lacks the model receives it from FICC before launch, in chunks through
Ray's object store (the channel FICC already has to every node: no listener or credential of
its own), and keeps it only once its SHA-256 matches.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Final

from ray.exceptions import RayError, RayTaskError

from ficc.adapters.runtimes.ray_replica import ModelFileRefused
from ficc.base.errors import EngineUnavailable, InvalidInput

CALL_TIMEOUT_SECONDS: Final = 30.0
"""An actor call that should answer at once (start after the model check, identity)."""
FETCH_CHUNK_BYTES: Final = 8 * 1024 * 1024
"""One piece of a blob sent to a node; one is in flight at a time, so memory stays bounded."""


def first_line(error: BaseException) -> str:
    """The line of a Ray error that says why (Ray's messages run to many lines)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    cause = next((line for line in lines if "because" in line), lines[0] if lines else "")
    return cause or type(error).__name__


async def call(ref: Any, timeout_seconds: float) -> Any:
    """Await an actor call; Ray's failures become FICC's errors."""
    try:
        async with asyncio.timeout(timeout_seconds):
            return await ref
    except RayTaskError as exc:
        if isinstance(exc.cause, ModelFileRefused):
            # The node refused the model's file (missing, or bytes not matching its digest).
            raise InvalidInput(str(exc.cause), field="model") from None
        raise EngineUnavailable(f"the replica's Ray actor failed: {first_line(exc)}") from exc
    except TimeoutError:
        raise EngineUnavailable(
            f"Ray did not place and start the replica's actor within {timeout_seconds:g} s "
            "(is the node short of the CPUs, GPUs or memory the replica reserves?)"
        ) from None
    except RayError as exc:
        raise EngineUnavailable(f"the replica's Ray actor failed: {first_line(exc)}") from exc


async def place_model(actor: Any, source: Path, default_store: str | None) -> Path:
    """The model's path in the node's blob store, sent there first when it is missing."""
    digest = source.name
    found: str | None = await call(
        actor.locate_blob.remote(digest, default_store), CALL_TIMEOUT_SECONDS
    )
    if found is not None:
        return Path(found)
    try:
        blob = await asyncio.to_thread(source.open, "rb")
    except FileNotFoundError:
        raise InvalidInput(
            f"blob {digest} of the model is not in FICC's blob store", field="model"
        ) from None
    with blob:
        size = os.fstat(blob.fileno()).st_size
        await call(actor.begin_fetch.remote(digest, size, default_store), CALL_TIMEOUT_SECONDS)
        while chunk := await asyncio.to_thread(blob.read, FETCH_CHUNK_BYTES):
            await call(actor.write_chunk.remote(chunk), CALL_TIMEOUT_SECONDS)
    received: str = await call(actor.finish_fetch.remote(), CALL_TIMEOUT_SECONDS)
    return Path(received)
