"""Password hashing with Argon2id (argon2-cffi's defaults), off the event loop.

Each hash or check costs about 64 MiB and tens of milliseconds of CPU. It runs in a worker
thread (argon2-cffi releases the GIL), and at most ``MAX_HASHES_AT_ONCE`` run together, so
logins can neither stall the loop (HyperNet heartbeats, the API) nor take all memory.
"""

from __future__ import annotations

import asyncio
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MAX_HASHES_AT_ONCE: Final = 2


class Argon2Hasher:
    def __init__(self, max_at_once: int = MAX_HASHES_AT_ONCE) -> None:
        self._hasher = PasswordHasher()
        self._slots = asyncio.Semaphore(max_at_once)

    async def hash(self, password: str) -> str:
        async with self._slots:
            return await asyncio.to_thread(self._hasher.hash, password)

    async def verify(self, password_hash: str, password: str) -> bool:
        async with self._slots:
            return await asyncio.to_thread(self._verify, password_hash, password)

    def _verify(self, password_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(password_hash, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
