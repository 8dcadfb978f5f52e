"""The login throttle's global backoff holds only addresses that have sent a wrong password
themselves (G9): wrong tries from anywhere never lock the owner's address out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ficc.base.errors import LimitExceeded
from ficc.domain.accounts import (
    ADDRESS_FREE_FAILURES,
    GLOBAL_FREE_FAILURES,
    GLOBAL_MAX_BACKOFF_SECONDS,
    LoginThrottle,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _fail(throttle: LoginThrottle, address: str, now: datetime) -> None:
    throttle.begin(address, now)
    throttle.end(address, now, succeeded=False)


def _flooded(now: datetime) -> LoginThrottle:
    """Past the global free failures: one wrong try from each of many addresses."""
    throttle = LoginThrottle()
    for index in range(GLOBAL_FREE_FAILURES + 5):
        _fail(throttle, f"203.0.113.{index}", now)
    return throttle


def test_an_address_that_never_failed_is_admitted_under_the_global_backoff() -> None:
    throttle = _flooded(NOW)
    throttle.begin("192.0.2.1", NOW)  # the owner, from its own address: admitted
    throttle.end("192.0.2.1", NOW, succeeded=True)


def test_the_attackers_next_try_rearms_nothing_for_an_address_that_never_failed() -> None:
    throttle = _flooded(NOW)
    now = NOW
    for _ in range(5):
        now += timedelta(seconds=GLOBAL_MAX_BACKOFF_SECONDS)
        _fail(throttle, "203.0.113.0", now)  # one wrong try a minute keeps the global wait up
        throttle.begin("192.0.2.1", now)
        throttle.end("192.0.2.1", now, succeeded=False)  # even a wrong try of its own is let in
        throttle.begin("192.0.2.2", now)
        throttle.end("192.0.2.2", now, succeeded=True)


def test_an_address_that_has_failed_waits_for_the_global_backoff() -> None:
    throttle = _flooded(NOW)
    with pytest.raises(LimitExceeded) as refused:
        throttle.begin("203.0.113.1", NOW)
    assert refused.value.details["limit"] == "login_failures"
    waited = NOW + timedelta(seconds=refused.value.details["retry_after_seconds"])
    throttle.begin("203.0.113.1", waited)


def test_the_per_address_backoff_still_holds_an_address_of_its_own() -> None:
    throttle = LoginThrottle()
    for _ in range(ADDRESS_FREE_FAILURES):
        _fail(throttle, "192.0.2.9", NOW)
    with pytest.raises(LimitExceeded) as refused:
        throttle.begin("192.0.2.9", NOW)
    assert refused.value.details["limit"] == "login_failures_per_address"
    throttle.begin("192.0.2.10", NOW)
