"""The audit log's entries: append-only facts about state changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

MAX_AUDIT_PAGE: Final = 500
"""The most entries one page of the audit log holds."""
MAX_AUDIT_SEQ: Final = 2**63 - 1
"""The largest ``seq`` an entry can have: a 64-bit signed integer in every database (SQLite
INTEGER, PostgreSQL BIGINT). A cursor past it names no entry and cannot reach a query."""


@dataclass(frozen=True)
class AuditEntry:
    """One state change: who did what to which target, with the proven peer identity if remote."""

    action: str
    actor: str
    project: str | None
    target: str | None
    at: datetime
    details: dict[str, Any] = field(default_factory=dict)
    peer_hypernet_id: str | None = None
    peer_cluster_key: str | None = None
    seq: int | None = None
