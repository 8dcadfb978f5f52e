"""Stored inference services and their replica attempts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ficc.domain.inference import AttemptState, ServiceSpec, ServiceState


@dataclass(frozen=True)
class ServiceRecord:
    """A managed service; ``revision`` grows on every change of spec or state."""

    id: str
    project: str
    spec: ServiceSpec
    node: str
    state: ServiceState
    revision: int
    error: str | None
    created_by_grant: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class AttemptRecord:
    """One try at running one replica, written before the launch (write-ahead)."""

    id: str
    service_id: str
    replica: int
    state: AttemptState
    serve_instance: str
    created_at: datetime
    pid: int | None = None
    pid_start_ticks: int | None = None
    port: int | None = None
    exit_code: int | None = None
    log_tail: str | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True)
class MutationReceipt:
    """What a mutation_id did: ``uncertain`` until its effect is known, then ``completed``."""

    scope: str
    mutation_id: str
    operation: str
    arguments_sha256: str
    state: str
    result: dict[str, Any] | None
    created_at: datetime
    completed_at: datetime | None = None
