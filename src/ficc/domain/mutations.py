"""Exactly-once mutations: the digest that tells a retry from a different request, a
mutation's receipt, and the states it goes through."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import rfc8785

from ficc.base.json_types import JSONObject


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


@dataclass(frozen=True)
class MutationReceipt:
    """What a mutation_id did: ``uncertain`` until its effect is known, then ``completed``.

    ``scope`` is where the mutation_id lives (a project locally, a grant remotely); ``state``
    is a :class:`ReceiptState` value."""

    scope: str
    mutation_id: str
    operation: str
    arguments_sha256: str
    state: str
    result: JSONObject | None
    created_at: datetime
    completed_at: datetime | None = None


def arguments_sha256(operation: str, arguments: Any) -> str:
    """SHA-256 of the JCS encoding of the operation and its arguments."""
    return hashlib.sha256(
        rfc8785.dumps({"operation": operation, "arguments": arguments})
    ).hexdigest()


def derived_entropy(scope: str, mutation_id: str, purpose: str) -> bytes:
    """Entropy for an ID that a mutation creates, so a retry finds what the first try made."""
    return hashlib.sha256(f"{scope}\x00{mutation_id}\x00{purpose}".encode()).digest()
