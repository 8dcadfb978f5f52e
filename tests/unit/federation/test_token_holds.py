"""What an invoke's admission holds of its grant's token budget, between two in-process
clusters: a reservation within the hold needs no transaction of its own, a prompt the hold does
not cover is reserved in full as before, a budget too small for the hold still admits what fits
it, and a hold no request took is given back. Every one leaves nothing reserved once settled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.support.fakes.peer_channel import OWNER, Pair
from tests.support.fakes.unit_of_work import FakeUnitOfWork, FakeUnitOfWorkFactory
from tests.unit.federation.test_metered_grants import engine_of, invocation, metered, usage_of

from ficc.base.errors import InvalidInput, LimitExceeded
from ficc.services.ports import EngineAddress


def grant_row(pair: Pair, grant_id: str) -> Any:
    return pair.grantor.uow_factory.store.grants[grant_id]  # type: ignore[attr-defined]


def grantor_transactions(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every unit of work the grantor opens from now on (one item each)."""
    opened: list[int] = []
    store = pair.grantor.uow_factory.store  # type: ignore[attr-defined]
    open_one: Callable[[FakeUnitOfWorkFactory], FakeUnitOfWork] = FakeUnitOfWorkFactory.__call__

    def counted(factory: FakeUnitOfWorkFactory) -> FakeUnitOfWork:
        if factory.store is store:
            opened.append(1)
        return open_one(factory)

    monkeypatch.setattr(FakeUnitOfWorkFactory, "__call__", counted)
    return opened


async def ask(pair: Pair, peer_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="inference.invoke", body=body
    )


async def test_a_reservation_within_the_admissions_hold_costs_no_transaction_of_its_own(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    await ask(pair, peer_id, invocation(service_id, max_tokens=5))  # names the grant once
    opened = grantor_transactions(pair, monkeypatch)
    await ask(pair, peer_id, invocation(service_id, max_tokens=5))
    # The admission (charge and hold), then the settlement.
    assert len(opened) == 2
    row = grant_row(pair, grant_id)
    assert row.tokens_reserved == 0
    grantor, _ = await usage_of(pair, grant_id)
    assert grantor["totals"]["prompt_tokens"] == row.prompt_tokens_used == 2 * 3


async def test_a_prompt_the_hold_does_not_cover_is_reserved_in_full_and_settled(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    await ask(pair, peer_id, invocation(service_id, max_tokens=5))  # names the grant once
    engine = engine_of(pair)

    async def many(engine: EngineAddress, text: str) -> int:
        return 600  # far more than the body's bytes: past what admission held

    monkeypatch.setattr(engine, "count_tokens", many)
    opened = grantor_transactions(pair, monkeypatch)
    await ask(pair, peer_id, invocation(service_id, max_tokens=5))
    # The admission, the reservation in full (the hold given back in it), the settlement.
    assert len(opened) == 3
    row = grant_row(pair, grant_id)
    assert (row.tokens_reserved, row.prompt_tokens_used) == (0, 3 + 600)
    # The next one does not fit the 397 left: refused by what the row holds, as before.
    with pytest.raises(LimitExceeded) as refused:
        await ask(pair, peer_id, invocation(service_id, max_tokens=5))
    assert refused.value.details["limit"] == "tokens"
    assert grant_row(pair, grant_id).tokens_reserved == 0


async def test_a_budget_too_small_for_the_hold_still_admits_what_fits_it(pair: Pair) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=20)
    # 3 prompt tokens and max_tokens 1000: nothing is held; the reservation lowers the bound.
    await ask(pair, peer_id, invocation(service_id, max_tokens=1000))
    _, sent = engine_of(pair).requests[-1]
    assert sent["max_tokens"] == 17
    assert grant_row(pair, grant_id).tokens_reserved == 0


async def test_a_hold_no_request_took_is_given_back(pair: Pair) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    # Admitted (and charged), then refused for a field the operation does not know, before
    # anything meters it: what its admission held goes back.
    with pytest.raises(InvalidInput):
        await ask(pair, peer_id, invocation(service_id, max_tokens=5) | {"extra": 1})
    row = grant_row(pair, grant_id)
    assert (row.requests_used, row.tokens_reserved) == (1, 0)
