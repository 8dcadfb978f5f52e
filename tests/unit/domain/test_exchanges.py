"""An exchange ends as the usage record of the side that counted it: its own fields carried
over by name, the side's grant, counts, outcome and end time beside them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ficc.domain import metering as m
from ficc.domain.exchanges import Exchange

STARTED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@dataclass(kw_only=True)
class CountingSide(Exchange):
    """A side's own state beside the exchange (as a tab's reservation is): never recorded."""

    reserved: int = 7


def test_an_exchange_ends_as_its_sides_usage_record_with_its_own_fields_carried_over() -> None:
    exchange = CountingSide(
        request="req_1",
        operation="inference.invoke",
        service="svc",
        started_at=STARTED,
        request_bytes=10,
    )
    exchange.response_bytes += 32
    ended = STARTED + timedelta(seconds=2)
    record = exchange.record("grant_1", m.GRANTOR, (3, 4), m.COMPLETED, ended)
    assert record == m.UsageRecord(
        request="req_1",
        grant="grant_1",
        side=m.GRANTOR,
        operation="inference.invoke",
        service="svc",
        started_at=STARTED,
        ended_at=ended,
        prompt_tokens=3,
        completion_tokens=4,
        request_bytes=10,
        response_bytes=32,
        outcome=m.COMPLETED,
    )
