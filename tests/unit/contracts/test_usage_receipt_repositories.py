"""Usage receipts' storage behaves alike in the fake and in SQL: a receipt is kept once per
grant, side and seq exactly as it was given, the head is the highest seq, pages go in seq
order, receipts are found by request, marks record why one failed, and a grant's last
reconciliation report is kept and replaced."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.contracts.records import NOW, fresh
from tests.unit.contracts.test_usage_repositories import record

from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.services.ports import UnitOfWorkFactory


def _chain(grant_id: str, count: int) -> list[r.StoredReceipt]:
    head, made = r.EMPTY_HEAD, []
    for index in range(count):
        usage = record(grant_id, index, request=f"req-{index}", service="svc_é")
        receipt = r.sign_receipt(r.receipt_body(usage, head), lambda message: b"\x01" * 64)
        made.append(r.StoredReceipt(grant_id, m.GRANTOR, index + 1, usage.request, receipt, True))
        head = r.head_after(receipt)
    return made


async def test_receipts_are_kept_once_per_seq_as_given_and_read_back_in_seq_order(
    uow_factory: UnitOfWorkFactory,
) -> None:
    grant_id = fresh("grant")
    chain = _chain(grant_id, 3)
    async with uow_factory() as uow:
        assert await uow.usage_receipts.head(grant_id, m.GRANTOR) == r.EMPTY_HEAD
        for item in reversed(chain):
            assert await uow.usage_receipts.add(item)
        assert not await uow.usage_receipts.add(chain[0])
        await uow.usage_receipts.add(
            r.StoredReceipt(grant_id, m.REQUESTER, 1, "req-0", chain[0].receipt, False, "x")
        )
        await uow.commit()
    async with uow_factory() as uow:
        head = await uow.usage_receipts.head(grant_id, m.GRANTOR)
        assert head == r.head_after(chain[2].receipt)
        assert head.totals["requests"] == 3
        page = await uow.usage_receipts.page(grant_id, m.GRANTOR, after=0, limit=2)
        assert page == chain[:2]
        assert r.digest_of(page[0].body) == page[0].digest
        rest = await uow.usage_receipts.page(grant_id, m.GRANTOR, after=2, limit=10)
        assert rest == chain[2:]
        found = await uow.usage_receipts.of_requests(grant_id, m.GRANTOR, ["req-1", "nope"])
        assert found == {"req-1": chain[1]}
        [theirs] = await uow.usage_receipts.page(grant_id, m.REQUESTER, after=0, limit=10)
        assert (theirs.verified, theirs.problem) == (False, "x")
        await uow.usage_receipts.mark(grant_id, m.REQUESTER, 1, None)
        await uow.usage_receipts.mark(grant_id, m.GRANTOR, 2, r.PREV)
        await uow.commit()
    async with uow_factory() as uow:
        [theirs] = await uow.usage_receipts.page(grant_id, m.REQUESTER, after=0, limit=10)
        assert (theirs.verified, theirs.problem) == (True, None)
        second = (await uow.usage_receipts.page(grant_id, m.GRANTOR, after=1, limit=1))[0]
        assert (second.verified, second.problem) == (False, r.PREV)
        assert await uow.usage_receipts.head(fresh("grant"), m.GRANTOR) == r.EMPTY_HEAD


async def test_a_receipt_is_appended_after_a_head_only_while_that_head_is_the_chains(
    uow_factory: UnitOfWorkFactory,
) -> None:
    grant_id = fresh("grant")
    first, second, third = _chain(grant_id, 3)
    after_first = r.head_after(first.receipt)
    async with uow_factory() as uow:
        assert await uow.usage_receipts.append_after(first, r.EMPTY_HEAD)
        # The empty head is not the chain's any more: nothing is written.
        assert not await uow.usage_receipts.append_after(second, r.EMPTY_HEAD)
        # Nor is a head whose digest is not the one kept at its seq.
        assert not await uow.usage_receipts.append_after(
            second, replace(after_first, digest="f" * 64)
        )
        assert await uow.usage_receipts.append_after(second, after_first)
        # A head a later receipt passed since is refused too.
        assert not await uow.usage_receipts.append_after(third, after_first)
        assert await uow.usage_receipts.append_after(third, r.head_after(second.receipt))
        # Another side's chain is its own.
        assert await uow.usage_receipts.append_after(replace(first, side=m.REQUESTER), r.EMPTY_HEAD)
        await uow.commit()
    async with uow_factory() as uow:
        kept = await uow.usage_receipts.page(grant_id, m.GRANTOR, after=0, limit=10)
        assert kept == [first, second, third]
        assert await uow.usage_receipts.head(grant_id, m.GRANTOR) == r.head_after(third.receipt)


async def test_a_rolled_back_receipt_is_not_kept(uow_factory: UnitOfWorkFactory) -> None:
    grant_id = fresh("grant")
    async with uow_factory() as uow:
        await uow.usage_receipts.add(_chain(grant_id, 1)[0])
    async with uow_factory() as uow:
        assert await uow.usage_receipts.head(grant_id, m.GRANTOR) == r.EMPTY_HEAD


async def test_the_last_reconciliation_report_of_a_grant_is_kept_and_replaced(
    uow_factory: UnitOfWorkFactory,
) -> None:
    grant_id, peer_id = fresh("grant"), fresh("peer")
    first = {"grant": grant_id, "matched": False, "invalid": [{"seq": 2, "reason": "missing"}]}
    async with uow_factory() as uow:
        assert await uow.usage_receipts.last_report(grant_id) is None
        await uow.usage_receipts.save_report(grant_id, peer_id, NOW, first)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.usage_receipts.last_report(grant_id) == first
        await uow.usage_receipts.save_report(grant_id, peer_id, NOW, {"matched": True})
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.usage_receipts.last_report(grant_id) == {"matched": True}


async def test_usage_records_are_found_by_request(uow_factory: UnitOfWorkFactory) -> None:
    grant_id = fresh("grant")
    rows = [record(grant_id, 0, request="a"), record(grant_id, 1, request="b")]
    async with uow_factory() as uow:
        for row in rows:
            await uow.usage.add(row)
        await uow.commit()
    async with uow_factory() as uow:
        found = await uow.usage.of_requests(grant_id, m.GRANTOR, ["b", "c"])
        assert list(found) == ["b"]
        assert found["b"].request_bytes == rows[1].request_bytes
        assert await uow.usage.of_requests(grant_id, m.REQUESTER, ["a"]) == {}


async def test_a_receipt_is_read_back_as_given_whatever_it_holds(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """What one JSON encoder refuses (an integer past 64 bits) is kept as given too, verified
    or not."""
    grant_id = fresh("grant")
    (first,) = _chain(grant_id, 1)
    odd = {**first.receipt, "extra": {"big": 2**70, "text": "é"}}
    kept = [replace(first, receipt=odd), replace(first, side=m.REQUESTER, receipt=odd)]
    async with uow_factory() as uow:
        for item in kept:
            await uow.usage_receipts.append(item)
        await uow.commit()
    async with uow_factory() as uow:
        for item in kept:
            assert await uow.usage_receipts.page(grant_id, item.side, after=0, limit=1) == [item]


async def test_a_signed_record_keeps_the_record_and_its_receipt_together_after_its_head(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """The grantor's record and receipt go in together or not at all, and its chain reads
    alike whichever way each receipt was kept."""
    grant_id = fresh("grant")
    first, second, third = _chain(grant_id, 3)
    usages = [record(grant_id, index, request=f"req-{index}") for index in range(3)]
    async with uow_factory() as uow:
        await uow.usage_receipts.append(first)
        # A head that is not the chain's: neither the record nor its receipt is written.
        assert not await uow.usage_receipts.add_signed(usages[1], second, r.EMPTY_HEAD)
        assert await uow.usage_receipts.add_signed(usages[1], second, r.head_after(first.receipt))
        assert await uow.usage_receipts.add_signed(usages[2], third, None)
        await uow.commit()
    async with uow_factory() as uow:
        kept = await uow.usage_receipts.page(grant_id, m.GRANTOR, after=0, limit=10)
        assert kept == [first, second, third]
        assert await uow.usage_receipts.page(grant_id, m.GRANTOR, after=1, limit=1) == [second]
        assert await uow.usage_receipts.head(grant_id, m.GRANTOR) == r.head_after(third.receipt)
        found = await uow.usage_receipts.of_requests(grant_id, m.GRANTOR, ["req-0", "req-2"])
        assert found == {"req-0": first, "req-2": third}
        records = await uow.usage.page(m.UsageQuery(grant_id, m.GRANTOR), limit=10)
        assert [item.request for item in records] == ["req-1", "req-2"]
        # One kept at its seq, in either table, is not kept again.
        assert not await uow.usage_receipts.add(replace(third, request="again"))
