"""Stored inference services and their replica attempts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypedDict

from ficc.base.json_types import JSONObject
from ficc.base.times import format_time
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


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica attempt as the service's owner sees it."""

    attempt: str
    replica: int
    state: AttemptState
    pid: int | None
    port: int | None
    exit_code: int | None
    log_tail: str | None
    created_at: datetime
    ended_at: datetime | None

    @classmethod
    def of(cls, attempt: AttemptRecord) -> ReplicaView:
        return cls(
            attempt=attempt.id,
            replica=attempt.replica,
            state=attempt.state,
            pid=attempt.pid,
            port=attempt.port,
            exit_code=attempt.exit_code,
            log_tail=attempt.log_tail,
            created_at=attempt.created_at,
            ended_at=attempt.ended_at,
        )

    def to_json(self) -> JSONObject:
        """The contract's replica object, in its key order."""
        return {
            "attempt": self.attempt,
            "replica": self.replica,
            "state": self.state.value,
            "pid": self.pid,
            "port": self.port,
            "exit_code": self.exit_code,
            "log_tail": self.log_tail,
            "created_at": format_time(self.created_at),
            "ended_at": None if self.ended_at is None else format_time(self.ended_at),
        }


@dataclass(frozen=True, slots=True)
class ServiceView:
    """A service as its owner sees it (with engine log lines; peers get a filtered view)."""

    id: str
    spec: ServiceSpec
    node: str
    state: ServiceState
    desired: DesiredState
    revision: int
    error: str | None
    created_by_grant: str | None
    unknown_attempts: int
    replicas: tuple[ReplicaView, ...]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, service: ServiceRecord, attempts: list[AttemptRecord]) -> ServiceView:
        return cls(
            id=service.id,
            spec=service.spec,
            node=service.node,
            state=service.state,
            desired=service.desired,
            revision=service.revision,
            error=service.error,
            created_by_grant=service.created_by_grant,
            unknown_attempts=sum(1 for a in attempts if a.state is AttemptState.UNKNOWN),
            replicas=tuple(ReplicaView.of(attempt) for attempt in attempts),
            created_at=service.created_at,
            updated_at=service.updated_at,
        )

    def to_json(self) -> JSONObject:
        """The contract's service object: plain JSON values only (times as RFC 3339 strings),
        written once here because the same object is kept in the receipt of an idempotent
        change, replayed from there, and filtered into what a peer is shown."""
        return {
            "id": self.id,
            "spec": self.spec.to_json(),
            "node": self.node,
            "state": self.state.value,
            "desired": self.desired.value,
            "revision": self.revision,
            "error": self.error,
            "created_by_grant": self.created_by_grant,
            "unknown_attempts": self.unknown_attempts,
            "replicas": [replica.to_json() for replica in self.replicas],
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
        }


class PreviewView(TypedDict):
    """Whether a spec fits a node now, and why not."""

    fits: bool
    reasons: list[str]
    warnings: list[str]
    node: str | None
    spec: JSONObject
    requirements: dict[str, int]
