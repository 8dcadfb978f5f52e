"""Receipt gaps survive a restart of the requester, and a retired grant's chain can still be
reconciled: between two in-process clusters over fakes (the requester started again over its
own store, as a restarted process finds its database)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.fakes.cluster import fake_cluster
from tests.support.fakes.peer_channel import OWNER, Pair
from tests.unit.federation.test_metered_grants import metered
from tests.unit.federation.test_usage_receipts import ask, reconcile, stored

from ficc.base.errors import NotFound, OutcomeUnknown
from ficc.bootstrap import lifecycle
from ficc.domain import metering as m


def spy_receipts(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The ``usage.receipts`` bodies the requester sends from now on."""
    asked: list[dict[str, Any]] = []
    sending = pair.channel.request

    async def spied(peer: str, operation: str, body: Any, **options: Any) -> Any:
        if operation == "usage.receipts":
            asked.append(dict(body))
        return await sending(peer, operation, body, **options)

    monkeypatch.setattr(pair.channel, "request", spied)
    return asked


async def cut(pair: Pair, peer_id: str, service_id: str, request: str) -> None:
    """A request whose answer (and the receipt in it) is lost on the way back."""
    pair.channel.lose_answer_of.add("inference.invoke")
    with pytest.raises(OutcomeUnknown):
        await ask(pair, peer_id, service_id, request)


async def test_a_gap_noticed_before_a_restart_is_fetched_on_the_first_request_after_it(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    await ask(pair, peer_id, service_id, "req-0")
    await cut(pair, peer_id, service_id, "req-cut")
    store = pair.requester.uow_factory.store  # type: ignore[attr-defined]
    assert store.receipt_chains == [(grant_id, peer_id, 1)]
    # The requester starts again over what it stored: nothing of the old process's memory.
    again = await fake_cluster(
        pair.requester.settings.state_dir.parent / "requester-again",
        clock=pair.clock,
        cluster_key=pair.channel.cluster_key,
        transport_factory=pair.channel.serving,
        store=store,
    )
    try:
        await lifecycle.start(again)
        restarted = Pair(again, pair.grantor, pair.channel, pair.clock)
        asked = spy_receipts(restarted, monkeypatch)
        await ask(restarted, peer_id, service_id, "req-2")
        # Fetched from the gap on, before the request: the chain is whole again.
        assert asked == [{"grant": grant_id, "after": 1, "limit": 100}]
        assert sorted(stored(again, m.REQUESTER, grant_id)) == [1, 2, 3]
        assert store.receipt_chains == []
        report = await reconcile(restarted, peer_id, grant_id)
        assert (report["matched"], report["head"]["seq"], report["invalid"]) == (True, 3, [])
    finally:
        await lifecycle.close(again)


async def test_a_gap_is_reported_by_reconcile_when_the_grantor_never_fills_it(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    await ask(pair, peer_id, service_id, "req-0")
    await cut(pair, peer_id, service_id, "req-cut")
    await ask(pair, peer_id, service_id, "req-2")
    # The grantor drops the receipt the requester lacked: the gap stays, named by its seq.
    grantor_store = pair.grantor.uow_factory.store  # type: ignore[attr-defined]
    del grantor_store.usage_receipts[(grant_id, m.GRANTOR, 2)]
    store = pair.requester.uow_factory.store  # type: ignore[attr-defined]
    del store.usage_receipts[(grant_id, m.REQUESTER, 2)]
    report = await reconcile(pair, peer_id, grant_id)
    assert report["matched"] is False
    assert {"seq": 2, "reason": "missing"} in report["invalid"]
    assert report["missing"] == [{"request": "req-cut", "outcome": "failed"}]


async def retire(pair: Pair, peer_id: str, grant_id: str) -> None:
    """The grantor revokes and retires the grant; the requester's copy learns it is gone."""
    await pair.grantor.federation.grants.revoke_grant(OWNER, "default", grant_id)
    await pair.grantor.federation.grants.retire_grant(OWNER, "default", grant_id)
    listed = await pair.requester.federation.grants.refresh(OWNER, "default", peer_id, grant=None)
    assert grant_id not in [item.id for item in listed.remote_grants]


async def test_a_retired_grants_chain_is_still_reconciled_and_its_gap_fetched(
    pair: Pair,
) -> None:
    service_id, peer_id, grant_id = await metered(pair, tokens=1000)
    await ask(pair, peer_id, service_id, "req-0")
    await cut(pair, peer_id, service_id, "req-cut")
    await retire(pair, peer_id, grant_id)
    report = await reconcile(pair, peer_id, grant_id)
    given = stored(pair.grantor, m.GRANTOR, grant_id)
    assert report == {
        "grant": grant_id,
        "head": {"seq": 2, "digest": given[2].digest},
        "matched": True,
        "fetched": 1,
        "missing": [],
        "invalid": [],
    }
    # Reconciling the peer's every grant covers the retired one too.
    every = await pair.requester.federation.receipts.reconcile(OWNER, "default", peer_id)
    assert [item["grant"] for item in every["grants"]] == [grant_id]
    assert every["grants"][0]["matched"] is True


async def test_a_grant_the_peer_never_gave_is_still_not_found(pair: Pair) -> None:
    _, peer_id, _ = await metered(pair, tokens=1000)
    with pytest.raises(NotFound):
        await reconcile(pair, peer_id, "grt_" + "z" * 26)
