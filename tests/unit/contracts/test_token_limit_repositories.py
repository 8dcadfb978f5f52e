"""Restricted tokens' storage behaves alike in the fake and in SQL: the rules come back as
stored, a token's budget is never passed by a reservation, settling gives back what was held
and counts the request, and usage records are found by the token that made them."""

from __future__ import annotations

import asyncio

from tests.unit.contracts.records import fresh
from tests.unit.contracts.test_usage_repositories import record

from ficc.domain import metering as m
from ficc.domain.token_limits import TokenRestrictions
from ficc.services.ports import UnitOfWorkFactory


async def test_a_token_s_rules_come_back_as_stored_and_its_budget_holds(
    uow_factory: UnitOfWorkFactory,
) -> None:
    parent, child = fresh("token"), fresh("token")
    rules = TokenRestrictions(
        peers=frozenset({fresh("peer")}),
        services=frozenset({"chat-route", fresh("service")}),
        tokens=100,
        tokens_per_minute=50,
        requests_per_minute=5,
    )
    async with uow_factory() as uow:
        await uow.token_limits.add(parent, rules)
        await uow.token_limits.add(child, TokenRestrictions(tokens=10, parent=parent))
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.token_limits.get(parent)
        assert stored is not None
        assert stored.restrictions == rules
        assert await uow.token_limits.get(fresh("token")) is None
        both = await uow.token_limits.of_tokens([parent, child, fresh("token")])
        assert set(both) == {parent, child}
        assert both[child].restrictions.parent == parent
        assert await uow.token_limits.reserve_tokens(parent, 60, limit=100)
        assert not await uow.token_limits.reserve_tokens(parent, 41, limit=100)
        await uow.token_limits.settle_tokens(
            parent, reserved=60, prompt_tokens=10, completion_tokens=20
        )
        await uow.commit()
    async with uow_factory() as uow:
        standing = await uow.token_limits.standing(parent)
        assert standing is not None
        assert (standing.requests_used, standing.tokens_reserved) == (1, 0)
        assert standing.tokens_left(100) == 70
        assert await uow.token_limits.reserve_tokens(parent, 70, limit=100)
        assert not await uow.token_limits.reserve_tokens(parent, 1, limit=100)
        await uow.token_limits.clear_reservations()
        await uow.commit()
    async with uow_factory() as uow:
        standing = await uow.token_limits.standing(parent)
        assert standing is not None
        assert standing.tokens_reserved == 0


async def test_concurrent_reservations_on_a_token_take_at_most_its_budget(
    uow_factory: UnitOfWorkFactory,
) -> None:
    token = fresh("token")
    async with uow_factory() as uow:
        await uow.token_limits.add(token, TokenRestrictions(tokens=100))
        await uow.commit()

    async def take() -> bool:
        async with uow_factory() as uow:
            taken = await uow.token_limits.reserve_tokens(token, 30, limit=100)
            await uow.commit()
            return taken

    taken = await asyncio.gather(*(take() for _ in range(8)))
    assert taken.count(True) == 3


async def test_usage_records_are_found_by_the_token_that_made_them(
    uow_factory: UnitOfWorkFactory,
) -> None:
    mine, other = fresh("token"), fresh("token")
    grant_id = fresh("grant")
    async with uow_factory() as uow:
        for index in range(3):
            await uow.usage.add(record(grant_id, index, side=m.REQUESTER, token=mine))
        await uow.usage.add(record(grant_id, 5, side=m.REQUESTER, token=other))
        await uow.usage.add(record(grant_id, 6, side=m.REQUESTER))
        await uow.commit()
    async with uow_factory() as uow:
        first = await uow.token_limits.usage_page(mine, limit=2)
        rest = await uow.token_limits.usage_page(mine, after=first[-1].seq, limit=10)
        totals = await uow.token_limits.usage_totals(mine)
        by_grant = await uow.usage.page(m.UsageQuery(grant_id, m.REQUESTER), limit=10)
    assert [r.token for r in first + rest] == [mine] * 3
    assert (len(first), len(rest)) == (2, 1)
    assert (totals["requests"], totals["prompt_tokens"]) == (3, 9)
    assert [r.token for r in by_grant] == [mine, mine, mine, other, None]
