"""Lost answers: ``pairing.finish`` and each remote mutation served by the other cluster, its
answer lost on the way back, then sent again: exactly one effect, and the first answer.

Two clusters run in process over real SQLite, joined by an in-memory channel in place of
HyperNet (tests/support/fakes/peer_channel.py); everything else is the real services.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from tests.support.fakes.peer_channel import OWNER, Pair, approved_offer, peers_of
from tests.support.isolation import add_node, record_model

from ficc.base.errors import OutcomeUnknown
from ficc.domain import peers as p


async def test_a_finish_whose_answer_was_lost_completes_when_sent_again(
    pair: Pair,
) -> None:
    offer_id, digest = await approved_offer(pair, {"scopes": ["discover"]})
    pair.channel.lose_answer_of.add("pairing.finish")
    with pytest.raises(OutcomeUnknown):
        await pair.requester.federation.pairing.finish_offer(
            OWNER, "default", offer_id, receipt=digest
        )
    # The grantor finished its side; the requester recorded its intent, still pending.
    [served] = await peers_of(pair.grantor)
    [intended] = await peers_of(pair.requester)
    assert (served.state, intended.state) == (p.PAIRED, p.PENDING)
    finished = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    again = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    [requester_peer] = await peers_of(pair.requester)
    [grantor_peer] = await peers_of(pair.grantor)
    assert requester_peer.id == intended.id == finished["peer"]["id"] == again["peer"]["id"]
    assert (requester_peer.state, grantor_peer.state) == (p.PAIRED, p.PAIRED)
    assert grantor_peer.id == served.id
    assert requester_peer.generation == grantor_peer.generation
    assert finished["offer"]["state"] == again["offer"]["state"] == "finished"
    assert pair.channel.sent.count("pairing.finish") == 2
    # The pairing works: a request under its grant is served.
    discovered = await pair.requester.remote.request(
        OWNER, "default", requester_peer.id, operation="discover", body={}
    )
    assert discovered["result"]["services"] == []


async def test_each_mutation_whose_answer_was_lost_runs_once_and_replays_its_first_answer(
    pair: Pair,
) -> None:
    node = await add_node(pair.grantor)
    model = await record_model(pair.grantor, "default", [1024], owned=True)
    offer_id, digest = await approved_offer(
        pair,
        {
            "scopes": ["inference:manage", "models:manage"],
            "models": [model.id],
            "nodes": [node.id],
        },
    )
    finished = await pair.requester.federation.pairing.finish_offer(
        OWNER, "default", offer_id, receipt=digest
    )
    peer_id = finished["peer"]["id"]
    spec = {"name": "lost", "model": model.id, "runtime": "llama.cpp", "node": node.id}
    manifest = {
        "name": "peer-made",
        "format": "gguf",
        "files": [{"path": "w.gguf", "size": 64, "sha256": "a" * 64}],
        "metadata": {},
    }

    async def lost_then_retried(operation: str, body: dict[str, Any]) -> dict[str, Any]:
        mutation_id = secrets.token_hex(16)
        pair.channel.lose_answer_of.add(operation)
        with pytest.raises(OutcomeUnknown) as lost:
            await pair.requester.remote.request(
                OWNER, "default", peer_id, operation=operation, body=body, mutation_id=mutation_id
            )
        assert lost.value.details["mutation_id"] == mutation_id
        assert lost.value.details["outcome"] == "unknown"
        retried = await pair.requester.remote.request(
            OWNER, "default", peer_id, operation=operation, body=body, mutation_id=mutation_id
        )
        first = pair.channel.lost[operation]
        assert first["replayed"] is False
        assert retried["replayed"] is True
        assert retried["result"] == first["result"], operation
        return dict(retried["result"])

    created_model = await lost_then_retried("models.create", {"manifest": manifest})
    service = await lost_then_retried("inference.create", {"spec": spec})
    replaced = await lost_then_retried(
        "inference.replace",
        {"service": service["id"], "revision": service["revision"], "spec": {**spec, "name": "b"}},
    )
    await lost_then_retried(
        "inference.control",
        {"service": service["id"], "revision": replaced["revision"], "operation": "remove"},
    )
    await lost_then_retried("models.remove", {"model": created_model["id"]})

    async with pair.grantor.uow_factory() as uow:
        services = await uow.services.list("default")
        models = await uow.models.list("default")
    # Exactly one effect each: one service made, replaced once, removed; one model made, removed.
    assert replaced["revision"] == service["revision"] + 1
    assert services == []
    assert [m.id for m in models] == [model.id]
