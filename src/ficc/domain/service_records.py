"""Stored inference services and their replica attempts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypedDict

from ficc.base.json_types import JSONObject
from ficc.domain.inference import (
    ATTEMPT_FINAL_STATES,
    AttemptState,
    DesiredState,
    ServiceSpec,
    ServiceState,
)


@dataclass(frozen=True)
class ServiceRecord:
    """A managed service; ``revision`` grows on every user change of spec or state.

    ``state`` is what the service is; ``desired`` what its owner (or the grant that created it)
    last asked for, kept across FICC's restarts and engine crashes.
    """

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
    desired: DesiredState = DesiredState.STOPPED


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


MAX_ENDED_ATTEMPTS: Final = 32
"""Ended attempts kept per service (with their exit and log lines): restarts add attempts,
and a service restarted for months would otherwise keep every one."""


def attempts_to_forget(attempts: list[AttemptRecord], keep: int = MAX_ENDED_ATTEMPTS) -> list[str]:
    """The oldest ended attempts beyond ``keep``; an unknown one is kept until acknowledged."""
    ended = [
        a
        for a in attempts
        if a.state in ATTEMPT_FINAL_STATES and a.state is not AttemptState.UNKNOWN
    ]
    ended.sort(key=lambda a: (a.created_at, a.replica, a.id))
    return [a.id for a in ended[: max(len(ended) - keep, 0)]]


class ReplicaView(TypedDict):
    """One replica attempt as the service's owner sees it."""

    attempt: str
    replica: int
    state: str
    pid: int | None
    port: int | None
    exit_code: int | None
    log_tail: str | None
    created_at: str
    ended_at: str | None


class ServiceView(TypedDict):
    """A service as its owner sees it: plain JSON values only, times as RFC 3339 strings,
    so the same object is kept in a change's receipt and replayed from there."""

    id: str
    spec: JSONObject
    node: str
    state: str
    desired: str
    revision: int
    error: str | None
    created_by_grant: str | None
    unknown_attempts: int
    replicas: list[ReplicaView]
    created_at: str
    updated_at: str


class RemovedServiceView(TypedDict):
    id: str
    removed: bool


class PreviewView(TypedDict):
    """Whether a spec fits a node now, and why not."""

    fits: bool
    reasons: list[str]
    warnings: list[str]
    node: str | None
    spec: JSONObject
    requirements: dict[str, int]


@dataclass(frozen=True)
class MutationReceipt:
    """What a mutation_id did: ``uncertain`` until its effect is known, then ``completed``."""

    scope: str
    mutation_id: str
    operation: str
    arguments_sha256: str
    state: str
    result: JSONObject | None
    created_at: datetime
    completed_at: datetime | None = None
