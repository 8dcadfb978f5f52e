"""What a cluster is configured with: the command line's settings and the environment's."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ficc.adapters.hypernet import SessionLimits, limits_from_environment
from ficc.adapters.hypernet.endpoint import DEFAULT_CONNECT_TIMEOUT_SECONDS
from ficc.adapters.sql.database import default_url
from ficc.adapters.state_dir import StateDir
from ficc.base.defaults import DEFAULT_HYPERNET_BIND, DEFAULT_LISTEN, DEFAULT_STREAM_JOIN_MS
from ficc.base.errors import InvalidInput
from ficc.base.units import seconds_setting
from ficc.domain.lease import DEFAULT_LAPSE_SECONDS
from ficc.domain.transfers import MAX_RANGE_BYTES, RANGE_BYTES, STALL_SECONDS

RANGE_BYTES_VARIABLE = "FICC_TRANSFER_RANGE_BYTES"
"""Bytes asked for in one ``models.range`` (default 64 MiB, at most 256 MiB). Tests and
benchmarks set it to keep model files small; an interruption re-fetches at most this much."""
STALL_SECONDS_VARIABLE = "FICC_TRANSFER_STALL_SECONDS"
"""Seconds without a byte before a range is abandoned and its transfer paused (default 30)."""
CONNECT_SECONDS_VARIABLE = "FICC_HYPERNET_CONNECT_SECONDS"
"""Seconds a connection to a peer may take before the peer is unreachable (default 5, 0.1 to
3600). Tests set it to see a stopped peer reported without the full wait."""
LEASE_SECONDS_VARIABLE = "FICC_LEASE_SECONDS"
"""Seconds without a renewal before the active process's lease lapses and a standby takes over
(default 10, 0.1 to 3600; PostgreSQL only). Tests set it to see a takeover sooner."""


def connect_seconds_from_environment(environ: Mapping[str, str] | None = None) -> float:
    """The peer connect deadline: :data:`CONNECT_SECONDS_VARIABLE`, unset or empty the default."""
    env = os.environ if environ is None else environ
    return seconds_setting(env, CONNECT_SECONDS_VARIABLE, DEFAULT_CONNECT_TIMEOUT_SECONDS)


def lease_seconds_from_environment(environ: Mapping[str, str] | None = None) -> float:
    """The active lease's lapse: :data:`LEASE_SECONDS_VARIABLE`, unset or empty the default."""
    env = os.environ if environ is None else environ
    return seconds_setting(env, LEASE_SECONDS_VARIABLE, DEFAULT_LAPSE_SECONDS)


@dataclass(frozen=True)
class TransferTuning:
    """How acquisition splits files and when it gives up on a silent peer."""

    range_bytes: int = RANGE_BYTES
    stall_seconds: float = STALL_SECONDS

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> TransferTuning:
        """Read the two ``FICC_TRANSFER_*`` variables; an unset or empty one keeps its default."""
        env = os.environ if environ is None else environ
        range_bytes = RANGE_BYTES
        raw_range = env.get(RANGE_BYTES_VARIABLE, "").strip()
        if raw_range:
            try:
                range_bytes = int(raw_range)
            except ValueError:
                range_bytes = 0
            if not 1 <= range_bytes <= MAX_RANGE_BYTES:
                raise InvalidInput(
                    f"{RANGE_BYTES_VARIABLE} must be an integer from 1 to {MAX_RANGE_BYTES}",
                    field=RANGE_BYTES_VARIABLE,
                )
        stall_seconds = seconds_setting(env, STALL_SECONDS_VARIABLE, STALL_SECONDS)
        return cls(range_bytes=range_bytes, stall_seconds=stall_seconds)


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Settings:
    """Everything `ficc serve` and `ficc init` are configured with."""

    state_dir: Path
    database_url: str | None = None
    listen: str = DEFAULT_LISTEN
    hypernet_bind: str = DEFAULT_HYPERNET_BIND
    hypernet_relay: str = "disabled"
    upstream_allow: tuple[str, ...] = ()
    """URL prefixes ``openai`` services may reach (``--upstream-allow``); none by default."""
    transfers: TransferTuning = field(default_factory=TransferTuning.from_environment)
    hypernet: SessionLimits = field(default_factory=limits_from_environment)
    hypernet_connect_seconds: float = field(default_factory=connect_seconds_from_environment)
    ray_address: str | None = None
    """The Ray cluster whose nodes FICC schedules replicas on (``--ray``); None: this machine."""
    lease_seconds: float = field(default_factory=lease_seconds_from_environment)
    """How long the active lease lasts unrenewed (PostgreSQL: one active, others standby)."""
    stream_join_ms: int = DEFAULT_STREAM_JOIN_MS
    """How often at most a streamed answer's pieces leave this cluster (``--stream-join-ms``;
    0: each event as the engine sent it)."""

    @property
    def state(self) -> StateDir:
        return StateDir(self.state_dir)

    @property
    def database(self) -> str:
        return self.database_url or default_url(self.state_dir)
