"""Routes: one model name over ordered targets (local services, peers' granted services).

Pure rules, no I/O and no clock: a route's spec as a user sends it, the order a policy tries
its targets in, which refusal lets the next target be tried (only one that proves the request
did not start), and the circuit breaker that spares requests a dead partner's connect timeout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from ficc.base.errors import (
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    LimitExceeded,
    PeerUnreachable,
)
from ficc.base.ids import parse_id
from ficc.base.numbers import parse_integer_between

ROUTE_FIELDS: Final = frozenset({"name", "policy", "targets"})
TARGET_FIELDS: Final = frozenset({"service", "peer", "weight", "max_in_flight"})
MAX_TARGETS: Final = 16
"""Targets of one route: a failover chain, not a catalogue."""
MAX_WEIGHT: Final = 1000
MAX_IN_FLIGHT: Final = 100_000
_ROUTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

ADMISSION_STAGE: Final = "admission"
"""``details["stage"]`` of a grantor's refusal made before the request ran (its gate)."""

BREAKER_BASE_SECONDS: Final = 15.0
"""How long a target that failed to connect is skipped first; doubled on each new failure."""
BREAKER_MAX_SECONDS: Final = 300.0


class Policy(StrEnum):
    """``priority``: the first target that admits the request; ``least-busy``: the target with
    the most free concurrency (times its weight), ties in order."""

    PRIORITY = "priority"
    LEAST_BUSY = "least-busy"


class Outcome(StrEnum):
    """What one target did with one request: the label of ``ficc_route_requests_total``.

    ``ok`` and ``error`` are answers (the target accepted the request); every other value is a
    skip, each one a proof that the request did not start there.
    """

    OK = "ok"
    ERROR = "error"
    NOT_RUNNING = "not_running"
    BUSY = "busy"
    CIRCUIT_OPEN = "circuit_open"
    FORBIDDEN = "forbidden"
    NOT_SENT = "not_sent"
    LIMIT_EXCEEDED = "limit_exceeded"
    GRANT_REVOKED = "grant_revoked"
    GRANT_EXPIRED = "grant_expired"
    PEER_UNREACHABLE = "peer_unreachable"

    @property
    def skipped(self) -> bool:
        return self not in (Outcome.OK, Outcome.ERROR)


ADMISSION_SKIPS: Final[tuple[tuple[type[FiccError], Outcome], ...]] = (
    (GrantRevoked, Outcome.GRANT_REVOKED),
    (GrantExpired, Outcome.GRANT_EXPIRED),
    (LimitExceeded, Outcome.LIMIT_EXCEEDED),
)
"""The grantor's refusals at admission that skip a remote target, and the skip each is."""


@dataclass(frozen=True)
class Target:
    """A local service (``peer`` None) or a peer's granted service, with its weight and the
    most requests this cluster sends it at once (None: the service's or grant's own bound)."""

    service: str
    peer: str | None = None
    weight: int = 1
    max_in_flight: int | None = None

    @property
    def local(self) -> bool:
        return self.peer is None

    @property
    def label(self) -> str:
        """What ``x-ficc-route-target`` says: the local service ID, or ``PEER/SERVICE``."""
        return self.service if self.peer is None else f"{self.peer}/{self.service}"

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {} if self.peer is None else {"peer": self.peer}
        shown["service"] = self.service
        shown["weight"] = self.weight
        shown["max_in_flight"] = self.max_in_flight
        return shown


@dataclass(frozen=True)
class RouteSpec:
    """A checked route spec; made only by :func:`parse_route_spec`."""

    name: str
    policy: Policy
    targets: tuple[Target, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "policy": self.policy.value,
            "targets": [target.to_json() for target in self.targets],
        }


@dataclass(frozen=True)
class Route:
    """A route of a project as stored."""

    id: str
    project: str
    spec: RouteSpec
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, **self.spec.to_json()}

    def replaced(self, spec: RouteSpec, at: datetime) -> Route:
        return replace(self, spec=spec, updated_at=at)


def parse_route_spec(data: object) -> RouteSpec:
    """A route as a user sends it; the refusal names the field and its rule."""
    if not isinstance(data, Mapping):
        raise InvalidInput("the body must be a JSON object", field="body")
    for key in data:
        if key not in ROUTE_FIELDS:
            raise InvalidInput(
                f"field {key} is unknown (allowed: {', '.join(sorted(ROUTE_FIELDS))})",
                field=str(key),
                details={"allowed": sorted(ROUTE_FIELDS)},
            )
    for key in sorted(ROUTE_FIELDS):
        if key not in data:
            raise InvalidInput(f"{key} is required", field=key)
    name = data["name"]
    if not isinstance(name, str) or not _ROUTE_NAME.fullmatch(name):
        raise InvalidInput(
            "name must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="name",
        )
    policy = data["policy"]
    allowed = [item.value for item in Policy]
    if not isinstance(policy, str) or policy not in allowed:
        raise InvalidInput(
            f"policy must be one of {', '.join(allowed)}",
            field="policy",
            details={"allowed": allowed},
        )
    targets = data["targets"]
    if not isinstance(targets, list) or not 1 <= len(targets) <= MAX_TARGETS:
        raise InvalidInput(f"targets must be a list of 1 to {MAX_TARGETS} targets", field="targets")
    parsed = tuple(_parse_target(item, f"targets[{i}]") for i, item in enumerate(targets))
    seen: set[tuple[str | None, str]] = set()
    for i, target in enumerate(parsed):
        if (target.peer, target.service) in seen:
            raise InvalidInput(
                f"targets[{i}] repeats the target {target.label}", field=f"targets[{i}]"
            )
        seen.add((target.peer, target.service))
    return RouteSpec(name, Policy(policy), parsed)


def _parse_target(item: object, where: str) -> Target:
    if not isinstance(item, Mapping):
        raise InvalidInput(
            f'{where} must be {{"service": ID}} or {{"peer": ID, "service": ID}}', field=where
        )
    for key in item:
        if key not in TARGET_FIELDS:
            raise InvalidInput(
                f"{where}.{key} is unknown (allowed: {', '.join(sorted(TARGET_FIELDS))})",
                field=f"{where}.{key}",
                details={"allowed": sorted(TARGET_FIELDS)},
            )
    if "service" not in item:
        raise InvalidInput(f"{where}.service is required", field=f"{where}.service")
    service = parse_id("service", item["service"], field=f"{where}.service")
    peer = None if "peer" not in item else parse_id("peer", item["peer"], field=f"{where}.peer")
    weight = parse_integer_between(item.get("weight", 1), f"{where}.weight", 1, MAX_WEIGHT)
    raw_cap = item.get("max_in_flight")
    cap = (
        None
        if raw_cap is None
        else parse_integer_between(raw_cap, f"{where}.max_in_flight", 1, MAX_IN_FLIGHT)
    )
    return Target(service=service, peer=peer, weight=weight, max_in_flight=cap)


# --- choosing and failing over ----------------------------------------------------------------


UNBOUNDED: Final = 1e12
"""The free concurrency of a target without a bound, before what it has in flight."""


def free_slots(capacity: int | None, in_flight: int) -> float:
    """Free concurrency of a target: ``capacity`` less what is in flight; without a bound,
    :data:`UNBOUNDED` less what is in flight (so the least loaded of those still comes first)."""
    return UNBOUNDED - in_flight if capacity is None else float(capacity - in_flight)


def order(policy: Policy, targets: Sequence[Target], free: Sequence[float]) -> list[int]:
    """The indexes of ``targets`` in the order a request tries them.

    ``priority``: as listed. ``least-busy``: most free concurrency (times the weight) first,
    ties in the listed order; a target with no bound before any bounded one, the fewest in
    flight per weight first among those; a target with no free slot still comes, last, to be
    skipped.
    """
    if policy is Policy.PRIORITY:
        return list(range(len(targets)))

    def score(index: int) -> float:
        room, weight = free[index], targets[index].weight
        if room >= UNBOUNDED / 2:
            return UNBOUNDED - (UNBOUNDED - room) / weight
        return room * weight if room > 0 else room

    return sorted(range(len(targets)), key=lambda i: (-score(i), i))


def skip_outcome(target: Target, error: FiccError) -> Outcome | None:
    """The skip a target's refusal is, or None: the refusal is the answer.

    A remote target is skipped only for what proves the request did not run there: the peer
    unreachable before the request was sent (``PeerUnreachable``: the transport turns a lost
    answer to a sent request into ``OutcomeUnknown``), or the grantor's gate refusing it
    (``limit_exceeded`` of any limit, ``grant_revoked``, ``grant_expired``, marked as made at
    admission). The same codes once the request ran (a grant revoked mid-answer) are answers.
    A local target's refusals are decided before it is called (:func:`local_skip`).
    """
    if target.local:
        return None
    if isinstance(error, PeerUnreachable):
        return Outcome.PEER_UNREACHABLE
    if error.details.get("stage") != ADMISSION_STAGE:
        return None
    for refusal, outcome in ADMISSION_SKIPS:
        if isinstance(error, refusal):
            return outcome
    return None


def local_skip(*, admitting: bool, capacity: int | None, in_flight: int) -> Outcome | None:
    """A local target is skipped when it has no ready replica, or is at its concurrency."""
    if not admitting:
        return Outcome.NOT_RUNNING
    if capacity is not None and in_flight >= capacity:
        return Outcome.BUSY
    return None


# --- the circuit breaker ----------------------------------------------------------------------


@dataclass
class Breaker:
    """Per target: closed; open for a growing interval after a connect failure; half-open
    after it, letting one request probe while the others skip; closed again on any answer.

    ``now`` is a monotonic time in seconds, passed in.
    """

    failures: int = 0
    open_until: float = 0.0
    probing: bool = field(default=False)

    def admits(self, now: float) -> bool:
        """Whether a request may try the target now; a half-open admission is the probe."""
        if self.failures == 0:
            return True
        if now < self.open_until or self.probing:
            return False
        self.probing = True
        return True

    def failed(self, now: float) -> None:
        """The target could not be reached: skip it for the next, longer, interval."""
        self.failures += 1
        interval = min(BREAKER_BASE_SECONDS * 2 ** (self.failures - 1), BREAKER_MAX_SECONDS)
        self.open_until = now + interval
        self.probing = False

    def answered(self) -> None:
        """The target answered (its answer or its refusal): it is reachable."""
        self.failures = 0
        self.open_until = 0.0
        self.probing = False

    def released(self) -> None:
        """A probe ended without telling (skipped before sending): let another probe."""
        self.probing = False

    @property
    def closed(self) -> bool:
        return self.failures == 0
