"""The port through which services run inference engines, and the values that cross it.

Services never start a process or open a socket themselves: they ask a :class:`Runtime`. A
:class:`ReplicaHandle` is plain data so that it can be recorded before FICC stops and used after
it restarts (fencing a left-over process by pid and start time). What the engines wrote is read
back through :class:`EngineLogs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ficc.domain.inference import RuntimeName

DEFAULT_LOG_TAIL_LINES = 40
"""How many of an engine's last log lines an operator sees beside a crash."""


@dataclass(frozen=True)
class NodeInfo:
    """What a runtime needs to know of a node to say whether it can run there."""

    node_id: str
    local: bool
    gpu_count: int


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as it can be proved to be the same one later: pid plus its start time.

    ``start_ticks`` is field 22 of ``/proc/PID/stat`` (clock ticks after boot); a pid reused by
    another process has another start time, so fencing by both never kills a stranger.
    """

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class LaunchRequest:
    """One replica to launch: the attempt it belongs to, the node, the model and its options.

    ``model_name`` is the name the engine answers to (the service ID); ``model_path`` the model's
    file on the node, for runtimes that load one.
    """

    attempt_id: str
    node: NodeInfo
    model_name: str
    options: Mapping[str, Any]
    model_path: Path | None = None


@dataclass(frozen=True)
class ReplicaHandle:
    """A launched replica; ``process`` is ``None`` when FICC started no process (``openai``)."""

    attempt_id: str
    runtime: RuntimeName
    base_url: str
    model_name: str
    process: ProcessIdentity | None = None
    port: int | None = None
    log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        """The engine's process ID, if FICC launched a process."""
        return None if self.process is None else self.process.pid


class HealthState(StrEnum):
    """``starting`` and ``unhealthy`` may pass; ``exited`` is final."""

    HEALTHY = "healthy"
    STARTING = "starting"
    UNHEALTHY = "unhealthy"
    EXITED = "exited"


@dataclass(frozen=True)
class ReplicaExit:
    """How a replica's process ended; ``crashed`` unless FICC asked it to stop."""

    crashed: bool
    exit_code: int | None
    signal: int | None
    log_tail: tuple[str, ...] = ()
    reason: str | None = None
    """Why it ended when no exit status tells (a Ray actor or its node died)."""

    def describe(self) -> str:
        """One line for the operator: how the process ended."""
        how = "crashed" if self.crashed else "stopped"
        if self.reason is not None:
            return f"engine {how}: {self.reason}"
        if self.signal is not None:
            return f"engine {how}: killed by signal {self.signal}"
        if self.exit_code is not None:
            return f"engine {how}: exit code {self.exit_code}"
        return f"engine {how}"


@dataclass(frozen=True)
class Health:
    """One health check: the state, a short reason when not healthy, and the exit if any."""

    state: HealthState
    reason: str | None = None
    exit: ReplicaExit | None = None

    @property
    def healthy(self) -> bool:
        """Whether the replica answered as an engine should."""
        return self.state is HealthState.HEALTHY


class FenceResult(StrEnum):
    """What fencing an earlier attempt's process found."""

    ABSENT = "absent"  # no process has that pid
    PID_REUSED = "pid_reused"  # another process holds the pid: left alone
    KILLED = "killed"  # the very process was ended


@dataclass(frozen=True)
class Availability:
    """Reasons a runtime cannot run on a node; empty means it can."""

    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def available(self) -> bool:
        """No reason against it."""
        return not self.reasons


class Runtime(Protocol):
    """An engine FICC can run replicas on; one adapter per :class:`RuntimeName`."""

    @property
    def name(self) -> RuntimeName:
        """The runtime this adapter implements."""
        ...

    async def availability(self, node: NodeInfo) -> Availability:
        """Why this runtime cannot run on ``node`` now (an empty result: it can)."""
        ...

    async def launch(self, request: LaunchRequest) -> ReplicaHandle:
        """Start a replica; Conflict naming the reasons when the node cannot run it."""
        ...

    async def wait_ready(self, handle: ReplicaHandle, timeout_seconds: float) -> Health:
        """Wait until the replica is healthy, has exited, or ``timeout_seconds`` passed."""
        ...

    async def health(self, handle: ReplicaHandle) -> Health:
        """One health check, answered promptly."""
        ...

    async def wait_exited(self, handle: ReplicaHandle) -> ReplicaExit:
        """Return when the replica ends, whether it crashed or was stopped."""
        ...

    async def stop(self, handle: ReplicaHandle, grace_seconds: float) -> ReplicaExit:
        """Ask the replica to end, force it after ``grace_seconds``; safe to repeat."""
        ...

    def log_tail(self, handle: ReplicaHandle, lines: int = DEFAULT_LOG_TAIL_LINES) -> list[str]:
        """The last lines the engine wrote, for the operator (local eyes only)."""
        ...

    async def fence(self, process: ProcessIdentity, grace_seconds: float) -> FenceResult:
        """End an earlier attempt's process after a FICC restart, only if it is the same one."""
        ...


@runtime_checkable
class ReplicaAdopter(Protocol):
    """A runtime whose replicas outlive the FICC process that launched them (Ray's detached
    actors): after a restart or a takeover, a live one is supervised again, not restarted."""

    async def adopt(
        self, attempt_id: str, process: ProcessIdentity, node_id: str, model_name: str
    ) -> ReplicaHandle | None:
        """The handle of the attempt's replica when its engine is the recorded process and
        answers the attempt's key; None (nothing kept) otherwise."""
        ...

    async def let_go(self, handle: ReplicaHandle) -> None:
        """Forget a replica without ending it: another FICC process owns (or fences) it now."""
        ...


@dataclass(frozen=True)
class LogChunk:
    """Lines of one attempt's log; ``next`` is the byte offset to read on from, and ``more``
    says whether bytes after it were already there (the read stopped at its bound)."""

    found: bool
    lines: tuple[str, ...]
    next: int
    more: bool


class EngineLogs(Protocol):
    """Where the engines' logs are kept (the state directory's ``run/``)."""

    async def read(
        self, service_id: str, attempt_id: str, *, after: int | None, lines: int, max_bytes: int
    ) -> LogChunk:
        """The last ``lines`` lines, or with ``after`` the lines from that byte offset on."""
        ...
