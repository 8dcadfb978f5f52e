"""Exactly-once mutations: the digest that tells a retry from a different request, and the
states a mutation's receipt goes through."""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

import rfc8785


class ReceiptState(StrEnum):
    """Where a mutation stands: the one vocabulary of receipts, local and remote."""

    UNCERTAIN = "uncertain"
    """Recorded before the effect: it may or may not have happened (a retry settles it)."""
    COMPLETED = "completed"
    """The effect committed with the receipt; a retry replays the result."""
    REFUSED = "refused"
    """The effect was refused and nothing happened; a retry gets the same refusal."""
    NOT_APPLIED = "not_applied"
    """Inspected while uncertain with nothing of it in flight: certainly nothing happened.
    It holds no capacity, and a retry with the same ID and arguments applies it once."""


def arguments_sha256(operation: str, arguments: Any) -> str:
    """SHA-256 of the JCS encoding of the operation and its arguments."""
    return hashlib.sha256(
        rfc8785.dumps({"operation": operation, "arguments": arguments})
    ).hexdigest()


def derived_entropy(scope: str, mutation_id: str, purpose: str) -> bytes:
    """Entropy for an ID that a mutation creates, so a retry finds what the first try made."""
    return hashlib.sha256(f"{scope}\x00{mutation_id}\x00{purpose}".encode()).digest()
