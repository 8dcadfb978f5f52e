"""Prometheus metrics of one FICC process: the families and their labels.

Counters and histograms are updated where the work happens (the HTTP middleware, the HyperNet
adapter, the SQLite writer lock). Figures that are state rather than events (services by
state, requests in flight per grant, engine restarts) are read when ``/metrics`` is scraped
(:mod:`ficc.adapters.state_gauges`), so nothing in the services layer knows about Prometheus.
This module imports nothing of storage: the SQLite writer lock reports here.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from ficc.domain.inference import RestartPolicy
from ficc.domain.routes import Outcome
from ficc.services.remote.table import OPERATIONS

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created doubles the output
REGISTRY: Final = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

HTTP_REQUESTS: Final = Counter(
    "ficc_http_requests",
    "HTTP requests answered, by route template (not the raw path), method and status.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
HTTP_DURATION: Final = Histogram(
    "ficc_http_request_duration_seconds",
    "Time from a request's arrival to the end of its response, by route template.",
    ["method", "route"],
    registry=REGISTRY,
)
FEDERATION_REQUESTS: Final = Counter(
    "ficc_federation_requests",
    "Federation requests: direction in (a peer asked) or out (this cluster asked), the "
    "operation and the outcome (ok or the error code).",
    ["direction", "operation", "outcome"],
    registry=REGISTRY,
)
FEDERATION_DURATION: Final = Histogram(
    "ficc_federation_request_duration_seconds",
    "Time a federation request took, by direction and operation.",
    ["direction", "operation"],
    registry=REGISTRY,
)
FEDERATION_IN_FLIGHT: Final = Gauge(
    "ficc_federation_in_flight",
    "Requests peers have in flight under the grants this cluster gave: by grant for the local "
    'owner, as one sum (grant="all") for any other scraper.',
    ["grant"],
    registry=REGISTRY,
)
TRANSFER_BYTES: Final = Counter(
    "ficc_transfer_bytes",
    "Model bytes streamed over HyperNet: direction in (received) or out (sent).",
    ["direction"],
    registry=REGISTRY,
)
FEDERATION_TOKENS: Final = Counter(
    "ficc_federation_tokens",
    "Tokens settled under grants: direction in (a peer's request this cluster served) or out "
    "(this cluster's request, as the grantor told it), the operation, and kind prompt or "
    "completion. No grant label: grant IDs of other projects are not every scraper's (G12).",
    ["direction", "operation", "kind"],
    registry=REGISTRY,
)
HYPERNET_SESSIONS: Final = Gauge(
    "ficc_hypernet_sessions",
    "HyperNet sessions open (handshake done) with peers.",
    registry=REGISTRY,
)
HYPERNET_HANDSHAKE_FAILURES: Final = Counter(
    "ficc_hypernet_handshake_failures",
    "HyperNet connections that failed their handshake, by role of this side.",
    ["role"],
    registry=REGISTRY,
)
INFERENCE_SERVICES: Final = Gauge(
    "ficc_inference_services",
    "Inference services by state.",
    ["state"],
    registry=REGISTRY,
)
ENGINE_RESTARTS: Final = Gauge(
    "ficc_engine_restarts",
    "Engine attempts launched beyond the first for each replica, over the cluster's life.",
    registry=REGISTRY,
)
INFERENCE_RESTARTS: Final = Counter(
    "ficc_inference_restarts",
    "Services started again after an engine ended by itself, by restart policy.",
    ["policy"],
    registry=REGISTRY,
)
SQLITE_LOCK_WAIT: Final = Histogram(
    "ficc_sqlite_lock_wait_seconds",
    "Time a transaction waited for SQLite's single writer lock.",
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
    registry=REGISTRY,
)


OTHER_OPERATION: Final = "other"
TRANSFER_LABEL: Final = "models.range"
ALL_GRANTS: Final = "all"
"""The one ``grant`` label a scraper other than the local owner sees: grant IDs of other
projects are not theirs to see."""


def operation_label(operation: str) -> str:
    """The wire operation, as the label of its series: only an operation of the table of peer
    operations; any other name, from anyone, counts as ``other``, so the labels are bounded
    by the table and a peer's made-up names take none of them."""
    return operation if operation in OPERATIONS else OTHER_OPERATION


def count_federation_tokens(
    direction: str, operation: str, prompt_tokens: int, completion_tokens: int
) -> None:
    """Add one settled request's tokens (what metering calls when it settles)."""
    label = operation_label(operation)
    if prompt_tokens:
        FEDERATION_TOKENS.labels(direction, label, "prompt").inc(prompt_tokens)
    if completion_tokens:
        FEDERATION_TOKENS.labels(direction, label, "completion").inc(completion_tokens)


def federation_outcome(error_code: str | None) -> str:
    return "ok" if error_code is None else error_code


def is_transfer(label: str) -> bool:
    """Whether a request with this operation label streams model bytes (``models.range``)."""
    return label == TRANSFER_LABEL


ROUTE_REQUESTS: Final = Counter(
    "ficc_route_requests",
    "Requests through a route, by route name, target (a local service ID or PEER/SERVICE) "
    "and outcome: ok or error (the target answered), or why it was skipped.",
    ["route", "target", "outcome"],
    registry=REGISTRY,
)


def count_route_outcome(route: str, target: str, outcome: Outcome) -> None:
    """One target's part in one request through a route."""
    ROUTE_REQUESTS.labels(route=route, target=target, outcome=outcome.value).inc()


def count_restart(policy: RestartPolicy) -> None:
    """One restart of a crashed service; the label is the policy (three values at most)."""
    INFERENCE_RESTARTS.labels(policy=policy.value).inc()


def exposition() -> bytes:
    """The Prometheus text format of every family."""
    return generate_latest(REGISTRY)
