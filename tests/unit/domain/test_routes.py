"""A route's rules: its spec refused naming the field, the order each policy tries targets in,
which refusal lets the next target be tried, and the circuit breaker's intervals."""

from __future__ import annotations

from typing import Any

import pytest

from ficc.base.errors import (
    Conflict,
    EngineUnavailable,
    FiccError,
    GrantExpired,
    GrantRevoked,
    InvalidInput,
    LimitExceeded,
    NotFound,
    OutcomeUnknown,
    PeerUnreachable,
)
from ficc.domain.routes import (
    BREAKER_BASE_SECONDS,
    BREAKER_MAX_SECONDS,
    Breaker,
    Outcome,
    Policy,
    Target,
    free_slots,
    local_skip,
    order,
    parse_route_spec,
    skip_outcome,
)

SVC = "svc_" + "a" * 26
SVC2 = "svc_" + "b" * 26
PEER = "per_" + "c" * 26
LOCAL = Target(SVC)
REMOTE = Target(SVC2, peer=PEER)
ADMISSION = {"stage": "admission"}


def spec(**changes: Any) -> dict[str, Any]:
    return {
        "name": "chat",
        "policy": "priority",
        "targets": [{"service": SVC}, {"peer": PEER, "service": SVC2}],
        **changes,
    }


def test_a_spec_round_trips_with_its_defaults_filled_in() -> None:
    parsed = parse_route_spec(spec())
    assert parsed.to_json() == {
        "name": "chat",
        "policy": "priority",
        "targets": [
            {"service": SVC, "weight": 1, "max_in_flight": None},
            {"peer": PEER, "service": SVC2, "weight": 1, "max_in_flight": None},
        ],
    }
    assert parse_route_spec(parsed.to_json()) == parsed
    assert [t.label for t in parsed.targets] == [SVC, f"{PEER}/{SVC2}"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        (spec(extra=1), "extra"),
        ({"name": "x", "policy": "priority"}, "targets"),
        (spec(name=""), "name"),
        (spec(name="has space"), "name"),
        (spec(policy="round-robin"), "policy"),
        (spec(targets=[]), "targets"),
        (spec(targets=[{"service": SVC}] * 17), "targets"),
        (spec(targets=["svc"]), "targets[0]"),
        (spec(targets=[{"peer": PEER}]), "targets[0].service"),
        (spec(targets=[{"service": "mdl_" + "a" * 26}]), "targets[0].service"),
        (spec(targets=[{"service": SVC}, {"peer": "x", "service": SVC}]), "targets[1].peer"),
        (spec(targets=[{"service": SVC, "weight": 0}]), "targets[0].weight"),
        (spec(targets=[{"service": SVC, "weight": True}]), "targets[0].weight"),
        (spec(targets=[{"service": SVC, "max_in_flight": 0}]), "targets[0].max_in_flight"),
        (spec(targets=[{"service": SVC, "url": "http://x"}]), "targets[0].url"),
        (spec(targets=[{"service": SVC}, {"service": SVC}]), "targets[1]"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(body: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_route_spec(body)
    assert refused.value.details["field"] == field
    assert field.split(".")[-1].split("[")[0] in refused.value.message


def test_priority_tries_targets_as_listed_whatever_is_free() -> None:
    targets = [LOCAL, REMOTE, Target(SVC2)]
    assert order(Policy.PRIORITY, targets, [0.0, 5.0, float("inf")]) == [0, 1, 2]


def test_least_busy_tries_the_most_free_first_times_its_weight_ties_in_order() -> None:
    a, b, c = Target(SVC), Target(SVC2, peer=PEER), Target(SVC2, weight=3)
    assert order(Policy.LEAST_BUSY, [a, b, c], [2.0, 2.0, 1.0]) == [2, 0, 1]
    assert order(Policy.LEAST_BUSY, [a, b, c], [1.0, 4.0, 1.0]) == [1, 2, 0]
    # Full or not running comes last, still in order; unbounded comes first.
    assert order(Policy.LEAST_BUSY, [a, b, c], [0.0, -float("inf"), free_slots(None, 9)]) == [
        2,
        0,
        1,
    ]


def test_least_busy_spreads_over_unbounded_targets_by_what_they_have_in_flight() -> None:
    a, b, c = Target(SVC), Target(SVC2), Target(SVC2, peer=PEER, weight=4)
    unbounded = [free_slots(None, 3), free_slots(None, 1), free_slots(None, 5)]
    # 5 in flight on weight 4 is 1.25 each: after b (1), before a (3).
    assert order(Policy.LEAST_BUSY, [a, b, c], unbounded) == [1, 2, 0]
    assert order(Policy.LEAST_BUSY, [a, b], [free_slots(None, 0), free_slots(None, 0)]) == [0, 1]
    assert order(Policy.LEAST_BUSY, [a, b], [free_slots(2, 0), free_slots(None, 50)]) == [1, 0]


def test_a_local_target_is_skipped_without_a_ready_replica_or_at_its_concurrency() -> None:
    assert local_skip(admitting=False, capacity=None, in_flight=0) is Outcome.NOT_RUNNING
    assert local_skip(admitting=True, capacity=1, in_flight=1) is Outcome.BUSY
    assert local_skip(admitting=True, capacity=2, in_flight=1) is None
    assert local_skip(admitting=True, capacity=None, in_flight=100) is None


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (PeerUnreachable("not sent"), Outcome.PEER_UNREACHABLE),
        (GrantRevoked("revoked", details=ADMISSION), Outcome.GRANT_REVOKED),
        (GrantExpired("expired", details=ADMISSION), Outcome.GRANT_EXPIRED),
        (
            LimitExceeded("x", details={"limit": "tokens", **ADMISSION}),
            Outcome.LIMIT_EXCEEDED,
        ),
        (
            LimitExceeded("x", details={"limit": "concurrent", **ADMISSION}),
            Outcome.LIMIT_EXCEEDED,
        ),
        # The same codes once the request ran: the answer.
        (GrantRevoked("revoked mid-answer"), None),
        (GrantExpired("expired mid-answer"), None),
        (LimitExceeded("x", details={"limit": "response_bytes"}), None),
        # Sent, and then the answer was lost: never replayed.
        (OutcomeUnknown("lost"), None),
        (EngineUnavailable("the engine failed"), None),
        (InvalidInput("bad temperature", details=ADMISSION), None),
        (NotFound("no such service", details=ADMISSION), None),
        (Conflict("stopped"), None),
    ],
)
def test_a_remote_target_is_skipped_only_where_the_request_did_not_start(
    error: FiccError, outcome: Outcome | None
) -> None:
    assert skip_outcome(REMOTE, error) is outcome
    assert skip_outcome(LOCAL, error) is None  # a local target is judged before it is called


def test_the_breaker_opens_for_a_growing_interval_and_lets_one_probe_after_it() -> None:
    breaker = Breaker()
    assert breaker.admits(0.0)
    breaker.failed(0.0)
    assert not breaker.admits(BREAKER_BASE_SECONDS - 0.1)
    assert breaker.admits(BREAKER_BASE_SECONDS)  # half-open: this one probes
    assert not breaker.admits(BREAKER_BASE_SECONDS)  # the others skip meanwhile
    breaker.failed(BREAKER_BASE_SECONDS)
    assert not breaker.admits(BREAKER_BASE_SECONDS * 3 - 0.1)
    assert breaker.admits(BREAKER_BASE_SECONDS * 3)
    breaker.released()  # the probe was skipped before sending: another may probe
    assert breaker.admits(BREAKER_BASE_SECONDS * 3)
    breaker.answered()
    assert breaker.closed
    assert breaker.admits(BREAKER_BASE_SECONDS * 3)


def test_the_breakers_interval_stops_growing_at_its_maximum() -> None:
    breaker = Breaker()
    for _ in range(20):
        breaker.failed(0.0)
    assert breaker.open_until == BREAKER_MAX_SECONDS
