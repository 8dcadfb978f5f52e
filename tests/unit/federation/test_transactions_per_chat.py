"""How many transactions one streamed federated chat costs each side, counted in process.

Each unit of work is a transaction (on SQLite a write lock and an fsync'd commit), so their
number per request bounds what a chat can cost however fast the rest becomes. Counted after
the first chat, which also names the grant once: the requester finds the route and records the
answer (2); the grantor admits the request and settles it (2), under a token budget too: the
admission that charges the request also holds what it can need of the grant's tokens, so the
reservation needs no transaction of its own (``docs/metering.md``, "Held at admission").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from tests.support.fakes.peer_channel import Pair
from tests.support.fakes.unit_of_work import FakeUnitOfWork, FakeUnitOfWorkFactory
from tests.unit.federation.test_metered_grants import engine_of, metered
from tests.unit.federation.test_usage_receipts import stream

REQUESTER_TRANSACTIONS = 2
GRANTOR_TRANSACTIONS = 2
GRANTOR_TRANSACTIONS_UNMETERED = 2


def counting_units_of_work(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every unit of work either cluster opens from now on, counted by side."""
    counts: Counter[str] = Counter()
    opened: Callable[[FakeUnitOfWorkFactory], FakeUnitOfWork] = FakeUnitOfWorkFactory.__call__
    grantor_store = pair.grantor.uow_factory.store  # type: ignore[attr-defined]

    def counted(factory: FakeUnitOfWorkFactory) -> FakeUnitOfWork:
        counts["grantor" if factory.store is grantor_store else "requester"] += 1
        return opened(factory)

    monkeypatch.setattr(FakeUnitOfWorkFactory, "__call__", counted)
    return counts


@pytest.mark.parametrize(
    ("terms", "grantor_transactions"),
    [({"tokens": 1000}, GRANTOR_TRANSACTIONS), ({}, GRANTOR_TRANSACTIONS_UNMETERED)],
    ids=["token-budget", "no-token-rule"],
)
async def test_a_streamed_federated_chat_costs_two_transactions_on_each_side(
    pair: Pair,
    monkeypatch: pytest.MonkeyPatch,
    terms: dict[str, int],
    grantor_transactions: int,
) -> None:
    service_id, peer_id, _grant_id = await metered(pair, **terms)
    engine_of(pair).chunks = ["role", "a", "b"]
    for number in range(3):
        counts = counting_units_of_work(pair, monkeypatch) if number else Counter[str]()
        await stream(pair, peer_id, service_id, f"req-counted-{number}", take=-1)
        if number:
            assert 0 < counts["requester"] <= REQUESTER_TRANSACTIONS, counts
            assert 0 < counts["grantor"] <= grantor_transactions, counts
        monkeypatch.undo()
