"""The slow hash that keeps the users' passwords (Argon2 in ``adapters/passwords.py``)."""

from __future__ import annotations

from typing import Protocol


class PasswordHasher(Protocol):
    """A slow hash; both calls run off the event loop (the adapter bounds how many at once)."""

    async def hash(self, password: str) -> str: ...
    async def verify(self, password_hash: str, password: str) -> bool: ...
