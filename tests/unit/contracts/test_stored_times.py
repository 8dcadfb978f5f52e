"""Times that fall on a whole second compare and sort as times, not as text: a moment with no
fraction (``12:00:00``) is neither later than ``12:00:00.5`` nor earlier than ``11:59:59.5``,
in every query that compares or orders stored times."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tests.unit.contracts.records import digest, fresh, offer, user
from tests.unit.contracts.test_account_repositories import a_token

from ficc.domain.accounts import LoginLink, WebSession
from ficc.domain.offers import OfferState
from ficc.services.ports import UnitOfWorkFactory

WHOLE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
HALF = timedelta(milliseconds=500)


async def test_a_session_expiring_on_a_whole_second_is_purged_half_a_second_after_not_before(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = user()
    on_the_second = WebSession(fresh("session"), holder.id, digest(), digest(), WHOLE, WHOLE)
    half_past = WebSession(fresh("session"), holder.id, digest(), digest(), WHOLE, WHOLE + HALF)
    async with uow_factory() as uow:
        await uow.users.add(holder)
        await uow.sessions.add(on_the_second)
        await uow.sessions.add(half_past)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.sessions.purge(now=WHOLE - HALF) == 0
        # At the whole second the one expiring half a second later is still live.
        assert await uow.sessions.purge(now=WHOLE) == 1
        assert await uow.sessions.by_secret_hash(half_past.secret_hash) == half_past
        assert await uow.sessions.purge(now=WHOLE + HALF) == 1
        await uow.commit()


async def test_a_login_link_expiring_on_a_whole_second_is_purged_after_it_not_before(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = user()
    link = LoginLink(fresh("login_link"), holder.id, digest(), WHOLE - HALF, WHOLE, None)
    async with uow_factory() as uow:
        await uow.users.add(holder)
        await uow.login_links.add(link)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.login_links.purge(now=WHOLE - HALF) == 0
        assert await uow.login_links.purge(now=WHOLE + HALF) == 1


async def test_an_offer_expiring_on_a_whole_second_waits_until_it_and_not_after(
    uow_factory: UnitOfWorkFactory,
) -> None:
    on_the_second = replace(offer(), created_at=WHOLE - HALF, expires_at=WHOLE)
    half_past = replace(offer(), created_at=WHOLE - HALF, expires_at=WHOLE + HALF)
    async with uow_factory() as uow:
        await uow.offers.add(on_the_second)
        await uow.offers.add(half_past)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.offers.count_received(now=WHOLE - HALF) == 2
        assert await uow.offers.count_received(now=WHOLE) == 1
        assert await uow.offers.oldest_received(now=WHOLE) == half_past
        assert await uow.offers.count_received(now=WHOLE + HALF) == 0


async def test_an_offer_expired_on_a_whole_second_is_purged_only_after_it(
    uow_factory: UnitOfWorkFactory,
) -> None:
    discarded = replace(
        offer(state=OfferState.DISCARDED), created_at=WHOLE - HALF, expires_at=WHOLE
    )
    async with uow_factory() as uow:
        await uow.offers.add(discarded)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.offers.purge(expired_before=WHOLE) == 0
        assert await uow.offers.purge(expired_before=WHOLE + HALF) == 1


async def test_records_made_within_one_second_list_in_the_order_they_were_made(
    uow_factory: UnitOfWorkFactory,
) -> None:
    holder = user()
    first = replace(a_token(holder.id), created_at=WHOLE)
    second = replace(a_token(holder.id), created_at=WHOLE + HALF)
    async with uow_factory() as uow:
        await uow.users.add(holder)
        await uow.tokens.add(second)
        await uow.tokens.add(first)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.tokens.list() == [first, second]
