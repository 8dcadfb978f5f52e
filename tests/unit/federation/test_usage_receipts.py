"""Usage receipts between two in-process clusters: the grantor signs each usage record of a
grant as the next receipt of its chain, the requester checks and keeps them, fetches those it
lacks, and reconcile names the seq of every receipt that was altered, dropped, reordered or
forged on either side."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import pytest
from tests.support.fakes.peer_channel import OWNER, Pair
from tests.support.openapi import check_answer
from tests.unit.federation.test_metered_grants import engine_of, invocation, metered

from ficc.adapters.keys import verify_signature
from ficc.base.errors import (
    GrantRevoked,
    InvalidInput,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
)
from ficc.base.request_ids import current_request_id
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.domain.receipts import b64
from ficc.services.ports.peers import PeerIdentity
from ficc.web.app import create_app


async def ask(pair: Pair, peer_id: str, service_id: str, request: str) -> None:
    current_request_id.set(request)
    await pair.requester.remote.request(
        OWNER, "default", peer_id, operation="inference.invoke", body=invocation(service_id)
    )


async def stream(pair: Pair, peer_id: str, service_id: str, request: str, *, take: int) -> None:
    """A streamed request whose caller reads ``take`` chunks (all: -1) and leaves."""
    current_request_id.set(request)
    async with pair.requester.remote.open_stream(
        OWNER,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, stream=True),
    ) as chunks:
        read = 0
        async for _ in chunks:
            read += 1
            if read == take:
                break


def stored(cluster: Any, side: str, grant_id: str) -> dict[int, r.StoredReceipt]:
    store = cluster.uow_factory.store
    return {
        seq: item
        for (grant, kept_side, seq), item in store.usage_receipts.items()
        if grant == grant_id and kept_side == side
    }


def grantor_key(pair: Pair) -> bytes:
    return pair.grantor.cluster_key.public_key


async def reconcile(pair: Pair, peer_id: str, grant_id: str) -> dict[str, Any]:
    report = await pair.requester.federation.receipts.reconcile(
        OWNER, "default", peer_id, grant=grant_id
    )
    [one] = report["grants"]
    return one


async def three_receipts(pair: Pair) -> tuple[str, str, str]:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    for index in range(3):
        await ask(pair, peer_id, service_id, f"req-{index}")
    return service_id, peer_id, grant_id


async def test_each_answer_carries_a_signed_receipt_chained_per_grant_that_the_requester_keeps(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    engine_of(pair).chunks = ["role", "a", "b"]
    await ask(pair, peer_id, service_id, "req-plain")
    await stream(pair, peer_id, service_id, "req-stream", take=-1)
    given = stored(pair.grantor, m.GRANTOR, grant_id)
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert sorted(given) == sorted(kept) == [1, 2]
    assert [kept[s].receipt for s in (1, 2)] == [given[s].receipt for s in (1, 2)]
    first, second = (given[s].receipt for s in (1, 2))
    assert first["body"]["kind"] == "ficc.usage/1"
    assert first["body"]["prev"] == r.GENESIS
    assert second["body"]["prev"] == first["digest"]
    assert second["body"]["totals"]["requests"] == 2
    assert second["body"]["totals"]["completion_tokens"] == 2
    head, findings = r.verify_chain(
        sorted((s, dict(i.receipt)) for s, i in kept.items()),
        grant=grant_id,
        public_key=grantor_key(pair),
        verify=verify_signature,
    )
    assert (findings, head.seq) == ([], 2)
    usage = await pair.requester.federation.usage.usage(OWNER, "default", grant_id)
    assert [(x["verified"], x["receipt"]["body"]["seq"]) for x in usage["records"]] == [
        (True, 1),
        (True, 2),
    ]
    report = await reconcile(pair, peer_id, grant_id)
    assert report == {
        "grant": grant_id,
        "head": {"seq": 2, "digest": second["digest"]},
        "matched": True,
        "fetched": 0,
        "missing": [],
        "invalid": [],
    }


async def test_receipts_of_cancelled_and_revoked_answers_are_fetched_and_verify(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    engine_of(pair).chunks = ["role", "a", "b", "c"]
    await stream(pair, peer_id, service_id, "req-cancelled", take=1)
    assert stored(pair.requester, m.REQUESTER, grant_id) == {}
    # The next request fetches the receipt the cancelled answer could not carry.
    await ask(pair, peer_id, service_id, "req-after")
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert sorted(kept) == [1, 2]
    assert kept[1].body["outcome"] == "cancelled"
    assert all(item.verified for item in kept.values())
    current_request_id.set("req-revoked")
    async with pair.requester.remote.open_stream(
        OWNER,
        "default",
        peer_id,
        operation="inference.invoke",
        body=invocation(service_id, stream=True),
    ) as chunks:
        await anext(chunks)
        await pair.grantor.federation.grants.revoke_grant(OWNER, "default", grant_id)
        with pytest.raises(GrantRevoked):
            [_ async for _ in chunks]
    report = await reconcile(pair, peer_id, grant_id)
    assert (report["matched"], report["fetched"], report["invalid"]) == (True, 1, [])
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert kept[3].body["outcome"] == "revoked"
    assert all(item.verified for item in kept.values())
    usage = await pair.requester.federation.usage.usage(OWNER, "default", grant_id)
    assert [x["verified"] for x in usage["records"]] == [True, True, True]


async def test_receipts_missing_after_a_cut_are_fetched_and_the_chains_match(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    await ask(pair, peer_id, service_id, "req-0")
    asked: list[dict[str, Any]] = []
    sending = pair.channel.request

    async def spied(peer: str, operation: str, body: Any, **options: Any) -> Any:
        if operation == "usage.receipts":
            asked.append(dict(body))
        return await sending(peer, operation, body, **options)

    monkeypatch.setattr(pair.channel, "request", spied)
    pair.channel.lose_answer_of.add("inference.invoke")
    with pytest.raises(OutcomeUnknown):
        await ask(pair, peer_id, service_id, "req-cut")
    assert sorted(stored(pair.requester, m.REQUESTER, grant_id)) == [1]
    await ask(pair, peer_id, service_id, "req-2")
    assert sorted(stored(pair.requester, m.REQUESTER, grant_id)) == [1, 2, 3]
    # Fetched from the gap on, not from the chain's start.
    assert asked == [{"grant": grant_id, "after": 1, "limit": 100}]
    report = await reconcile(pair, peer_id, grant_id)
    assert (report["matched"], report["head"]["seq"], report["invalid"]) == (True, 3, [])
    given = stored(pair.grantor, m.GRANTOR, grant_id)
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert {s: i.digest for s, i in given.items()} == {s: i.digest for s, i in kept.items()}


def alter(cluster: Any, side: str, grant_id: str, seq: int, **body: Any) -> None:
    store = cluster.uow_factory.store
    item = store.usage_receipts[(grant_id, side, seq)]
    receipt = {**item.receipt, "body": {**item.receipt["body"], **body}}
    store.usage_receipts[(grant_id, side, seq)] = replace(item, receipt=receipt)


async def test_a_receipt_altered_on_the_requesters_disk_is_named_by_its_seq(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    alter(pair.requester, m.REQUESTER, grant_id, 2, completion_tokens=1)
    report = await reconcile(pair, peer_id, grant_id)
    assert report["matched"] is False
    assert report["invalid"] == [
        {"seq": 2, "reason": "differs"},
        {"seq": 2, "reason": "digest_mismatch"},
    ]
    usage = await pair.requester.federation.usage.usage(OWNER, "default", grant_id)
    shown = [(x["verified"], x["receipt_problem"]) for x in usage["records"]]
    assert shown == [(True, None), (False, "digest_mismatch"), (True, None)]


async def test_a_receipt_altered_and_signed_again_by_the_grantor_is_named_by_its_seq(
    pair: Pair,
) -> None:
    """The grantor holds its key: a rewritten receipt signs, but no longer is the one the
    requester was given, and the next one no longer follows it."""
    _, peer_id, grant_id = await three_receipts(pair)
    store = pair.grantor.uow_factory.store
    item = store.usage_receipts[(grant_id, m.GRANTOR, 2)]
    body = {**item.receipt["body"], "prompt_tokens": 300}
    forged = r.sign_receipt(body, pair.grantor.cluster_key.sign)
    store.usage_receipts[(grant_id, m.GRANTOR, 2)] = replace(item, receipt=forged)
    report = await reconcile(pair, peer_id, grant_id)
    assert report["invalid"] == [
        {"seq": 2, "reason": "differs"},
        {"seq": 2, "reason": "totals_mismatch"},
        {"seq": 3, "reason": "prev_mismatch"},
    ]


async def test_a_receipt_altered_on_the_grantors_disk_is_named_by_its_seq(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    alter(pair.grantor, m.GRANTOR, grant_id, 1, response_bytes=1)
    report = await reconcile(pair, peer_id, grant_id)
    assert report["invalid"] == [
        {"seq": 1, "reason": "differs"},
        {"seq": 1, "reason": "digest_mismatch"},
    ]


async def test_a_receipt_dropped_by_the_grantor_is_named_by_its_seq(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    del pair.grantor.uow_factory.store.usage_receipts[(grant_id, m.GRANTOR, 2)]
    report = await reconcile(pair, peer_id, grant_id)
    assert report["invalid"] == [{"seq": 2, "reason": "missing"}]
    assert report["matched"] is False


async def test_a_receipt_dropped_by_the_requester_is_fetched_again(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    del pair.requester.uow_factory.store.usage_receipts[(grant_id, m.REQUESTER, 2)]
    before = await pair.requester.federation.usage.usage(OWNER, "default", grant_id)
    assert [x["verified"] for x in before["records"]] == [True, False, True]
    report = await reconcile(pair, peer_id, grant_id)
    assert (report["matched"], report["fetched"], report["invalid"]) == (True, 1, [])


async def test_receipts_reordered_on_either_side_are_named_by_their_seqs(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    for cluster, side in ((pair.grantor, m.GRANTOR), (pair.requester, m.REQUESTER)):
        kept = cluster.uow_factory.store.usage_receipts
        one, two = kept[(grant_id, side, 1)], kept[(grant_id, side, 2)]
        kept[(grant_id, side, 1)] = replace(two, seq=1)
        kept[(grant_id, side, 2)] = replace(one, seq=2)
        report = await reconcile(pair, peer_id, grant_id)
        assert {"seq": 1, "reason": "seq_mismatch"} in report["invalid"]
        assert {"seq": 2, "reason": "seq_mismatch"} in report["invalid"]
        kept[(grant_id, side, 1)], kept[(grant_id, side, 2)] = one, two


async def test_a_forged_signature_is_named_by_its_seq(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    store = pair.requester.uow_factory.store
    item = store.usage_receipts[(grant_id, m.REQUESTER, 3)]
    forged = {**item.receipt, "signature": b64(bytes(64))}
    store.usage_receipts[(grant_id, m.REQUESTER, 3)] = replace(item, receipt=forged)
    report = await reconcile(pair, peer_id, grant_id)
    assert report["invalid"] == [
        {"seq": 3, "reason": "differs"},
        {"seq": 3, "reason": "signature"},
    ]


async def test_a_receipt_whose_counts_are_not_what_the_requester_was_told_is_kept_failing(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    meter = pair.grantor.federation.grants.meter
    signing = meter._signed

    async def inflated(uow: Any, record: m.UsageRecord) -> Any:
        return await signing(uow, replace(record, prompt_tokens=record.prompt_tokens + 50))

    meter._signed = inflated  # type: ignore[method-assign]
    await ask(pair, peer_id, service_id, "req-inflated")
    [kept] = stored(pair.requester, m.REQUESTER, grant_id).values()
    assert (kept.verified, kept.problem) == (False, "counts_mismatch")
    report = await reconcile(pair, peer_id, grant_id)
    assert report["invalid"] == [{"seq": 1, "reason": "counts_mismatch"}]


async def test_requests_without_a_receipt_are_reported_with_their_outcomes(pair: Pair) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    store = pair.requester.uow_factory.store
    store.usage = [*store.usage, replace(store.usage[-1], request="req-never", outcome="failed")]
    report = await reconcile(pair, peer_id, grant_id)
    assert report["missing"] == [{"request": "req-never", "outcome": "failed"}]
    assert report["matched"] is False
    assert await pair.requester.federation.receipts.last_report(grant_id) == report


async def test_usage_receipts_answers_a_grants_own_peer_alone_in_bounded_pages(
    pair: Pair,
) -> None:
    _, _, grant_id = await three_receipts(pair)
    serve = pair.grantor.federation.operations.serve
    requester = pair.channel
    identity = PeerIdentity(requester.hypernet_id, requester.cluster_key.public_key, 1)
    known = await pair.grantor.federation.known.lookup(requester.hypernet_id)
    identity = replace(identity, generation=known[0].generation)
    page = await serve(identity, "usage.receipts", {"grant": grant_id, "limit": 2}, 0)
    assert isinstance(page, dict)
    assert [item["seq"] for item in page["receipts"]] == [1, 2]
    assert (page["next"], page["head"]["seq"]) == (2, 3)
    rest = await serve(identity, "usage.receipts", {"grant": grant_id, "after": 2}, 0)
    assert isinstance(rest, dict)
    assert ([item["seq"] for item in rest["receipts"]], rest["next"]) == ([3], None)
    stranger = PeerIdentity("9" * 64, b"\x01" * 32, identity.generation)
    with pytest.raises(PermissionDenied) as refused:
        await serve(stranger, "usage.receipts", {"grant": grant_id}, 0)
    assert refused.value.details["reason"] == "not_paired"
    other = "grt_" + "a" * 26
    with pytest.raises(NotFound):
        await serve(identity, "usage.receipts", {"grant": other}, 0)
    with pytest.raises(InvalidInput) as bad:
        await serve(identity, "usage.receipts", {"grant": grant_id, "limit": 101}, 0)
    assert bad.value.details["field"] == "limit"


async def test_the_reconcile_route_answers_its_documented_report_and_usage_shows_receipts(
    pair: Pair,
) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    del pair.grantor.uow_factory.store.usage_receipts[(grant_id, m.GRANTOR, 2)]
    app = create_app(pair.requester)
    token = (pair.requester.settings.state_dir / "owner.token").read_text().strip()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://127.0.0.1:8470",
        headers={"Authorization": f"Bearer {token}"},
    ) as api:
        path = "/api/v1/federation/peers/{peer_id}/reconcile"
        answer = await api.post(path.format(peer_id=peer_id), json={"grant": grant_id})
        body = check_answer(app.openapi(), path, answer)
        assert body["grants"][0]["invalid"] == [{"seq": 2, "reason": "missing"}]
        everything = await api.post(path.format(peer_id=peer_id), json={})
        assert [g["grant"] for g in check_answer(app.openapi(), path, everything)["grants"]] == [
            grant_id
        ]
        bad = await api.post(path.format(peer_id=peer_id), json={"grant": "nope"})
        assert bad.status_code == 400
        assert bad.json()["error"]["details"]["field"] == "grant"
        usage_path = "/api/v1/federation/grants/{grant_id}/usage"
        usage = await api.get(usage_path.format(grant_id=grant_id))
        records = check_answer(app.openapi(), usage_path, usage)["records"]
        assert all(r["receipt"]["body"]["kind"] == "ficc.usage/1" for r in records)
        page = await api.get(f"/ui/p/default/grants/{grant_id}")
        assert page.status_code == 200
        assert "the chains do not match" in page.text


async def keep_in_order(pair: Pair, peer_id: str, grant_id: str, order: list[int]) -> None:
    """The requester keeps the grantor's receipts of ``grant_id`` as if their answers had
    arrived in ``order`` (concurrent answers end in one order and arrive in another)."""
    given = stored(pair.grantor, m.GRANTOR, grant_id)
    store = pair.requester.uow_factory.store
    for key in [k for k in store.usage_receipts if k[0] == grant_id and k[1] == m.REQUESTER]:
        del store.usage_receipts[key]
    records = {u.request: u for u in store.usage if u.grant == grant_id and u.side == m.REQUESTER}
    receipts = pair.requester.federation.receipts
    async with pair.requester.uow_factory() as uow:
        peer = await uow.peers.get(peer_id)
        assert peer is not None
        for seq in order:
            await receipts.keep(uow, peer, records[given[seq].request], given[seq].receipt)
        await uow.commit()


async def test_answers_arriving_out_of_order_leave_no_gap_and_every_receipt_verifies(
    pair: Pair,
) -> None:
    # Eight clients on one grant: answers end 1, 2, 3 at the grantor and arrive 1, 3, 2. The
    # late one fills its place: nothing is fetched, nothing is marked failing.
    _, peer_id, grant_id = await three_receipts(pair)
    await keep_in_order(pair, peer_id, grant_id, [1, 3, 2])
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert [(s, kept[s].verified, kept[s].problem) for s in sorted(kept)] == [
        (1, True, None),
        (2, True, None),
        (3, True, None),
    ]
    assert pair.requester.federation.receipts.gaps.after(grant_id) is None


async def test_a_late_receipt_that_does_not_link_to_its_neighbours_is_kept_failing(
    pair: Pair,
) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    given = pair.grantor.uow_factory.store.usage_receipts
    two = given[(grant_id, m.GRANTOR, 2)]
    forged = {**two.receipt, "body": {**two.receipt["body"], "prev": "1" * 64}}
    given[(grant_id, m.GRANTOR, 2)] = replace(two, receipt=forged)
    await keep_in_order(pair, peer_id, grant_id, [1, 3, 2])
    kept = stored(pair.requester, m.REQUESTER, grant_id)
    assert not kept[2].verified
    assert kept[2].problem is not None


async def test_a_gap_is_not_fetched_while_requests_that_may_fill_it_are_on_their_way(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, peer_id, grant_id = await three_receipts(pair)
    await keep_in_order(pair, peer_id, grant_id, [1, 3])
    receipts = pair.requester.federation.receipts
    assert receipts.gaps.after(grant_id) == 1
    asked: list[str] = []
    sending = pair.channel.request

    async def spied(peer: str, operation: str, body: Any, **options: Any) -> Any:
        asked.append(operation)
        return await sending(peer, operation, body, **options)

    monkeypatch.setattr(pair.channel, "request", spied)
    async with pair.requester.uow_factory() as uow:
        peer = await uow.peers.get(peer_id)
    assert peer is not None
    await receipts.catch_up(peer, grant_id, busy=True)
    assert asked == []
    # Quiet again (or the gap old enough): the next request fetches it, once.
    await receipts.catch_up(peer, grant_id, busy=False)
    assert asked == ["usage.receipts"]
    assert receipts.gaps.after(grant_id) is None
    assert sorted(stored(pair.requester, m.REQUESTER, grant_id)) == [1, 2, 3]
