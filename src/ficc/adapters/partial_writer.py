"""The blob store's writer of one range of a partial file: ordered, hashed, off the loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ficc.services.ports import Hasher


@dataclass
class OrderedPartialWriter:
    """Runs write-and-hash jobs in submission order on one thread of its own.

    ``write_at(position, data)`` and ``sync_file()`` are the store's blocking calls for the file;
    writing and hashing both release the GIL on large buffers, so the thread overlaps with the
    event loop's receiving. A call waits only while more than ``queued_bytes`` are queued.
    """

    write_at: Callable[[int, bytes], None]
    sync_file: Callable[[], None]
    hasher: Hasher
    queued_bytes: int
    _executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="ficc-transfer"),
        init=False,
    )
    _pending: deque[tuple[concurrent.futures.Future[None], int]] = field(
        default_factory=deque, init=False
    )
    _queued: int = field(default=0, init=False)

    async def write(self, position: int, data: bytes) -> None:
        """Queue writing ``data`` at ``position`` and adding it to the hash, in order."""
        await self._submit(len(data), self._write, position, data)

    async def sync(self) -> None:
        """Queue an fsync of what was written so far."""
        await self._submit(0, self.sync_file)

    def _write(self, position: int, data: bytes) -> None:
        self.write_at(position, data)
        self.hasher.update(data)

    async def _submit(self, size: int, job: Callable[..., None], *args: Any) -> None:
        self._pending.append((self._executor.submit(job, *args), size))
        self._queued += size
        while self._queued > self.queued_bytes:
            await self._oldest()

    async def _oldest(self) -> None:
        future, size = self._pending[0]
        await asyncio.wrap_future(future)
        self._pending.popleft()
        self._queued -= size

    async def drain(self) -> None:
        while self._pending:
            await self._oldest()

    async def close(self) -> None:
        self._pending.clear()
        await asyncio.shield(asyncio.to_thread(self._executor.shutdown, True))
