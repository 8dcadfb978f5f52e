"""The two key operations the core needs, as parameters: the core imports no crypto library.

A :class:`Signer` holds a FICC cluster key (Ed25519) and signs; a :data:`Verify` callable checks
an Ed25519 signature. Adapters implement them with a real library; tests with fixed keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Verify = Callable[[bytes, bytes, bytes], bool]
"""``verify(public_key, message, signature) -> bool``: true only for a valid signature."""


class Signer(Protocol):
    """Signs with a cluster key; ``public_key`` is its 32-byte Ed25519 public key."""

    @property
    def public_key(self) -> bytes:
        """The 32-byte public key signatures verify against."""
        ...

    def sign(self, message: bytes) -> bytes:
        """A 64-byte Ed25519 signature of ``message``."""
        ...
