"""Exactly-once mutations: the digest that tells a retry from a different request."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def arguments_sha256(operation: str, arguments: Any) -> str:
    """SHA-256 of the JCS encoding of the operation and its arguments."""
    return hashlib.sha256(
        rfc8785.dumps({"operation": operation, "arguments": arguments})
    ).hexdigest()


def derived_entropy(scope: str, mutation_id: str, purpose: str) -> bytes:
    """Entropy for an ID that a mutation creates, so a retry finds what the first try made."""
    return hashlib.sha256(f"{scope}\x00{mutation_id}\x00{purpose}".encode()).digest()
