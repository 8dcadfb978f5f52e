"""The idempotency scope against an in-memory unit of work: replay, refusal, conflict, and one
receipt read per transaction."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.base.errors import LimitExceeded, MutationConflict
from ficc.domain.mutations import ReceiptState
from ficc.services import mutations
from ficc.services.mutations import MutationKey

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MUTATION_ID = "0123456789abcdef0123456789abcdef"
ARGUMENTS: dict[str, Any] = {"spec": {"name": "a"}}


def key(arguments: dict[str, Any] = ARGUMENTS) -> MutationKey:
    return MutationKey.grant("grt_x", MUTATION_ID, "inference.create", arguments)


async def test_a_completed_mutation_replays_exactly_its_first_result() -> None:
    factory = FakeUnitOfWorkFactory()
    first = {"id": "svc_1", "revision": 1, "nested": {"a": [1, 2]}}
    async with factory() as uow:
        scope = await mutations.begin(uow, key())
        assert (scope.replayed, scope.result, scope.state) == (False, None, None)
        await scope.mark_uncertain(NOW)
        await scope.complete(first, NOW)
        await uow.commit()
    async with factory() as uow:
        again = await mutations.begin(uow, key())
    assert again.replayed
    assert again.result == first
    assert again.state == ReceiptState.COMPLETED
    # Each transaction read the receipt once, however often it was begun and written.
    assert factory.store.receipt_reads == [1, 1]


async def test_a_second_begin_in_one_transaction_reads_nothing() -> None:
    factory = FakeUnitOfWorkFactory()
    async with factory() as uow:
        await mutations.begin(uow, key())
        await mutations.replay(uow, key())
        await mutations.record(uow, lambda: NOW, key(), state="completed", result={"ok": 1})
        await uow.commit()
    assert factory.store.receipt_reads == [1]


async def test_other_arguments_under_one_mutation_id_are_a_conflict_and_change_nothing() -> None:
    factory = FakeUnitOfWorkFactory()
    async with factory() as uow:
        scope = await mutations.begin(uow, key())
        await scope.complete({"id": "svc_1"}, NOW)
        await uow.commit()
    before = dict(factory.store.receipts)
    async with factory() as uow:
        with pytest.raises(MutationConflict) as caught:
            await mutations.begin(uow, key({"spec": {"name": "b"}}))
    assert caught.value.details["mutation_id"] == MUTATION_ID
    assert factory.store.receipts == before


async def test_a_refused_mutation_is_refused_again_with_the_same_error() -> None:
    factory = FakeUnitOfWorkFactory()
    refused = LimitExceeded("too many", details={"limit": "created_services", "allowed": 64})
    async with factory() as uow:
        scope = await mutations.begin(uow, key())
        await scope.mark_uncertain(NOW)
        await uow.commit()
    async with factory() as uow:
        scope = await mutations.begin(uow, key())
        assert scope.state == ReceiptState.UNCERTAIN
        assert not scope.replayed
        await scope.refuse(refused, NOW)
        await uow.commit()
    async with factory() as uow:
        again = await mutations.begin(uow, key())
    refusal = again.refusal
    assert isinstance(refusal, LimitExceeded)
    assert (refusal.message, refusal.details) == (refused.message, refused.details)
    assert not again.replayed
    assert again.result is None


async def test_nothing_is_kept_when_the_transaction_does_not_commit() -> None:
    factory = FakeUnitOfWorkFactory()
    async with factory() as uow:
        scope = await mutations.begin(uow, key())
        await scope.complete({"id": "svc_1"}, NOW)
    assert factory.store.receipts == {}
    assert factory.store.commits == 0


def test_local_and_grant_keys_live_in_their_own_scopes() -> None:
    assert MutationKey.local("default", MUTATION_ID, "op", {}).scope == "local:default"
    assert key().scope == mutations.grant_scope("grt_x") == "grant:grt_x"
    assert key().arguments_sha256 != key({"other": 1}).arguments_sha256


async def test_a_receipt_keeps_the_answer_as_the_caller_is_shown_it() -> None:
    factory = FakeUnitOfWorkFactory()

    def shown(result: dict[str, Any]) -> dict[str, Any]:
        return {"id": result["id"]}

    shown_key = MutationKey.grant("grt_x", MUTATION_ID, "inference.create", ARGUMENTS, shown)
    async with factory() as uow:
        scope = await mutations.begin(uow, shown_key)
        answer = await scope.complete({"id": "svc_1", "replicas": [{"pid": 7}]}, NOW)
        await uow.commit()
    assert answer == {"id": "svc_1"}
    async with factory() as uow:
        # The way a caller is shown results is no part of the key's identity.
        again = await mutations.begin(uow, key())
    assert again.result == answer


async def test_a_retry_waits_for_the_try_in_flight_of_its_mutation_only() -> None:
    tries = mutations.InFlight()
    order: list[str] = []
    first_inside = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with tries.one_at_a_time(key()):
            order.append("first in")
            first_inside.set()
            await release_first.wait()
            order.append("first out")

    async def retry() -> None:
        async with tries.one_at_a_time(key()):
            order.append("retry in")

    async def other() -> None:
        other_key = MutationKey.grant("grt_x", "f" * 32, "inference.create", ARGUMENTS)
        async with tries.one_at_a_time(other_key):
            order.append("other in")

    running = asyncio.create_task(first())
    await first_inside.wait()
    waiting = asyncio.create_task(retry())
    await asyncio.sleep(0)  # one turn: the retry now waits on the first try
    await other()
    assert order == ["first in", "other in"]
    assert len(tries) == 1
    release_first.set()
    await asyncio.gather(running, waiting)
    assert order == ["first in", "other in", "first out", "retry in"]
    assert len(tries) == 0
