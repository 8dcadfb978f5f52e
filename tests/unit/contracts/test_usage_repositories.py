"""Metering's storage behaves alike in the fake and in SQL: a token reservation never passes
the grant's budget, settling gives back what was reserved, and usage records page in order,
filter by time and sum per hour and day."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.unit.contracts.records import NOW, at, fresh, grant, peer, project

from ficc.domain import metering as m
from ficc.services.ports import UnitOfWorkFactory


def record(grant_id: str, started: float, **fields: object) -> m.UsageRecord:
    base = m.UsageRecord(
        request=fresh("grant"),
        grant=grant_id,
        side=m.GRANTOR,
        operation="inference.invoke",
        service=None,
        started_at=at(started),
        ended_at=at(started + 1),
        prompt_tokens=3,
        completion_tokens=5,
        request_bytes=100,
        response_bytes=200,
        outcome=m.COMPLETED,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


async def test_a_reservation_never_passes_the_budget_and_settling_gives_back_what_it_held(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = peer()
    given = grant(holder.id, tokens=100)
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(holder)
        await uow.grants.add(given)
        assert await uow.usage.reserve_tokens(given.id, 60, limit=100)
        assert not await uow.usage.reserve_tokens(given.id, 41, limit=100)
        assert await uow.usage.reserve_tokens(given.id, 40, limit=100)
        await uow.usage.settle_tokens(given.id, reserved=60, prompt_tokens=10, completion_tokens=20)
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.grants.get(given.id)
        assert stored is not None
        assert (stored.tokens_reserved, stored.prompt_tokens_used) == (40, 10)
        assert stored.completion_tokens_used == 20
        assert stored.remaining_tokens() == 30
        assert stored.used() == {
            "requests": 0,
            "prompt_tokens": 10,
            "completion_tokens": 20,
            "transfer_bytes": 0,
        }
        assert await uow.usage.reserve_tokens(given.id, 30, limit=100)
        assert not await uow.usage.reserve_tokens(given.id, 1, limit=100)
        # Without a budget a reservation only counts what is held.
        assert await uow.usage.reserve_tokens(given.id, 10**6, limit=None)
        await uow.usage.clear_reservations()
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.grants.get(given.id)
        assert stored is not None
        assert stored.tokens_reserved == 0


async def test_settling_answers_the_standing_the_grant_is_left_with(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = peer()
    given = grant(holder.id, tokens=100)
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(holder)
        await uow.grants.add(given)
        assert await uow.usage.reserve_tokens(given.id, 60, limit=100)
        standing = await uow.usage.settle_and_stand(
            given.id, reserved=60, prompt_tokens=10, completion_tokens=20
        )
        assert standing is not None
        assert standing == await uow.usage.standing(given.id)
        assert (standing.tokens_reserved, standing.prompt_tokens_used) == (0, 10)
        assert standing.completion_tokens_used == 20
        missing = await uow.usage.settle_and_stand(
            fresh("grant"), reserved=0, prompt_tokens=1, completion_tokens=1
        )
        assert missing is None


async def test_concurrent_reservations_take_at_most_the_budget(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = peer()
    given = grant(holder.id, tokens=100)
    async with uow_factory() as uow:
        await project(uow)
        await uow.peers.add(holder)
        await uow.grants.add(given)
        await uow.commit()

    async def reserve() -> bool:
        async with uow_factory() as uow:
            taken = await uow.usage.reserve_tokens(given.id, 30, limit=100)
            await uow.commit()
            return taken

    taken = await asyncio.gather(*(reserve() for _ in range(8)))
    assert taken.count(True) == 3
    async with uow_factory() as uow:
        stored = await uow.grants.get(given.id)
        assert stored is not None
        assert stored.tokens_reserved == 90


async def test_usage_records_page_in_order_filter_by_time_and_sum_per_hour_and_day(
    uow_factory: UnitOfWorkFactory,
) -> None:
    grant_id = fresh("grant")
    hour = 3600
    rows = [
        record(grant_id, 0),
        record(grant_id, 10, outcome=m.CANCELLED, completion_tokens=1),
        record(grant_id, hour + 5, counted_prompt_tokens=2, side=m.REQUESTER),
        record(grant_id, 2 * hour),
        record(fresh("grant"), 0),
    ]
    async with uow_factory() as uow:
        for row in rows:
            await uow.usage.add(row)
        await uow.commit()
    async with uow_factory() as uow:
        first = await uow.usage.page(m.UsageQuery(grant_id, m.GRANTOR), limit=2)
        assert [(r.request, r.outcome) for r in first] == [
            (rows[0].request, "completed"),
            (rows[1].request, "cancelled"),
        ]
        assert first[0] == replace(rows[0], seq=first[0].seq)
        rest = await uow.usage.page(
            m.UsageQuery(grant_id, m.GRANTOR), after=first[-1].seq, limit=10
        )
        assert [r.request for r in rest] == [rows[3].request]
        mine = await uow.usage.page(m.UsageQuery(grant_id, m.REQUESTER), limit=10)
        assert [(r.request, r.counted_prompt_tokens) for r in mine] == [(rows[2].request, 2)]
        timed = await uow.usage.page(m.UsageQuery(grant_id, m.GRANTOR, at(5), at(hour)), limit=10)
        assert [r.request for r in timed] == [rows[1].request]
        totals = await uow.usage.totals(m.UsageQuery(grant_id, m.GRANTOR))
        assert {k: totals[k] for k in m.TOTAL_FIELDS} == {
            "requests": 3,
            "prompt_tokens": 9,
            "completion_tokens": 11,
            "request_bytes": 300,
            "response_bytes": 600,
        }
        hours, days = totals["hours"], totals["days"]
        assert isinstance(hours, list)
        assert isinstance(days, list)
        assert [(h["hour"], h["requests"]) for h in hours] == [
            (NOW.strftime("%Y-%m-%dT%H:00:00Z"), 2),
            ((NOW.replace(hour=NOW.hour + 2)).strftime("%Y-%m-%dT%H:00:00Z"), 1),
        ]
        assert [(d["day"], d["completion_tokens"]) for d in days] == [
            (NOW.strftime("%Y-%m-%d"), 11)
        ]
        empty = await uow.usage.totals(m.UsageQuery(fresh("grant"), m.GRANTOR))
        assert empty["requests"] == 0
        assert empty["hours"] == []
